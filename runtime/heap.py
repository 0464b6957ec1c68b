"""The client process's heap, and Python's collection of its oldest generation.

SGLang, torch and the rest of the client's imports leave millions of long-lived objects in the process,
and every collection of the oldest generation walks all of them with every thread stopped: 0.29–0.31 s
each, about once per two seconds of drafting at slope 0 × 16 async on the simulated servers (traced with
`gc.callbacks`; a 2 s run that took such a pause read 8–15 % fewer tokens/s than one that did not, and which
run took it followed from their order). `gc.freeze()` moves what exists once the servers are connected
out of the collector's reach, as long-running Python servers do; what is allocated later is collected as
before.
"""

from __future__ import annotations

import functools
import gc


@functools.cache  # once per process: later calls return at once
def freeze_startup_objects() -> None:
    """Collect what is garbage now, then leave everything that remains to the permanent generation."""
    gc.collect()
    gc.freeze()
