"""Deterministic draws: a number that depends only on what it is drawn for.

Below every layer (programs, verifiers, runtime, eval, cli): any of them may use it.
"""

from __future__ import annotations

import hashlib


def unit(*parts: object) -> float:
    """A number in [0, 1) from the parts, the same for the same parts in any process or order."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
