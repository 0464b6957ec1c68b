"""The client process's heap, and Python's collection of its oldest generation.

SGLang, torch and the rest of the client's imports leave millions of long-lived objects in the process,
and every collection of the oldest generation walks all of them with every thread stopped, for about
0.3 s; under drafting load such collections come every few seconds. `gc.freeze()` moves what exists
once the servers are connected out of the collector's reach, as long-running Python servers do; what
is allocated later is collected as usual.
"""

from __future__ import annotations

import functools
import gc


@functools.cache  # once per process: later calls return at once
def freeze_startup_objects() -> None:
    """Collect what is garbage now, then leave everything that remains to the permanent generation."""
    gc.collect()
    gc.freeze()
