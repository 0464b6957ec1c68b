"""The project's cache folder, and files written whole or not at all.

Below every layer (programs, verifiers, runtime, eval, cli): any of them may use it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """$LOOKAHEAD_CACHE, else $XDG_CACHE_HOME/lookahead-reasoning, else ~/.cache/lookahead-reasoning."""
    base = os.environ.get("LOOKAHEAD_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "lookahead-reasoning"
    )
    return Path(base)


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
