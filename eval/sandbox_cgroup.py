"""A memory cgroup per sandbox run, where the host lets this process make one.

RLIMIT_AS bounds one process's address space; a cgroup bounds the memory of every process in it together,
shared memory and tmpfs pages included. Each run gets a child of this process's own memory cgroup (so it
stays inside whatever bounds this process), with a hard limit and no swap; bwrap's processes join it
before the sandboxed command starts (eval/sandbox.py holds bwrap at --block-fd until then), so everything
the candidate starts is counted. cgroup v1's memory hierarchy and cgroup v2 with the memory controller
delegated to this process's cgroup (listed in its cgroup.subtree_control) both serve. Elsewhere
`available()` is False and the sandbox relies on its rlimits and seccomp filter.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from pathlib import Path

PREFIX = "lookahead-sandbox-"


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(root within its hierarchy, mount point, fs type, super options) of each cgroup mount."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((fields[3], fields[4], tail[0], set(tail[2].split(","))))
    return found


def own_memory_cgroup() -> tuple[Path, str] | None:
    """This process's memory cgroup directory and its version ("v1" or "v2"), or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mounts = _mounts()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            kinds = [(root, point) for root, point, kind, options in mounts if kind == "cgroup" and "memory" in options]
            version = "v1"
        elif controllers == "":
            kinds = [(root, point) for root, point, kind, _ in mounts if kind == "cgroup2"]
            version = "v2"
        else:
            continue
        for root, point in kinds:
            if path == root or path.startswith(root.rstrip("/") + "/"):
                directory = Path(point) / path[len(root):].lstrip("/")
                if version == "v1" or _delegates_memory(directory):
                    return directory, version
    return None


def _delegates_memory(directory: Path) -> bool:
    try:
        return "memory" in (directory / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


class MemoryCgroup:
    """One run's cgroup: `add` bwrap's processes, `remove` it once they are gone."""

    def __init__(self, limit_bytes: int):
        found = own_memory_cgroup()
        if found is None:
            raise OSError("no memory cgroup of this process was found")
        parent, self.version = found
        self.path = parent / f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self.path.mkdir()
        try:
            if self.version == "v1":
                self._write("memory.limit_in_bytes", limit_bytes)
                self._write("memory.memsw.limit_in_bytes", limit_bytes, optional=True)  # with swap accounting
            else:
                self._write("memory.max", limit_bytes)
                self._write("memory.swap.max", 0, optional=True)
        except OSError:
            self.remove()
            raise

    def _write(self, name: str, value: int, optional: bool = False) -> None:
        target = self.path / name
        if optional and not target.exists():
            return
        target.write_text(str(value))

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def remove(self, wait_s: float = 2.0) -> None:
        """rmdir, once the processes killed at the end of the run have left it."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)


_AVAILABLE: tuple[bool, str] | None = None
_LOCK = threading.Lock()


def available() -> tuple[bool, str]:
    """Whether a memory cgroup can be made and removed here (probed once), and if not, why."""
    global _AVAILABLE
    with _LOCK:
        if _AVAILABLE is None:
            try:
                MemoryCgroup(64 << 20).remove()
                _AVAILABLE = (True, "")
            except OSError as error:
                _AVAILABLE = (False, f"{type(error).__name__}: {error}")
        return _AVAILABLE
