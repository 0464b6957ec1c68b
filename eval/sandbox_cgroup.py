"""A cgroup per sandbox run, for memory and for processes, where the host lets this process make one.

RLIMIT_AS bounds one process's address space; a memory cgroup bounds the memory of every process in it
together, shared memory and tmpfs pages included. RLIMIT_NPROC does not bind a process whose real user is
host root (the kernel exempts it, and CAP_SYS_RESOURCE/CAP_SYS_ADMIN holders), which is where bwrap runs
when the grader is root and nobody cannot reach the interpreter; a pids cgroup's pids.max binds every
uid, root included. Each run gets a child of this process's own cgroup for each controller (so it stays
inside whatever bounds this process), with a hard memory limit and no swap, and a process limit; bwrap's
processes join them before the sandboxed command starts (eval/sandbox.py holds bwrap at --block-fd until
then), so everything the candidate starts is counted. cgroup v1 keeps each controller in a hierarchy of
its own (/sys/fs/cgroup/memory, /sys/fs/cgroup/pids), so a run may have two directories; under cgroup v2 a
controller serves where it is delegated to this process's cgroup (listed in its cgroup.subtree_control),
and the controllers found there share one directory, as a process is in one v2 cgroup only. Where a
controller serves neither way, `available(controller)` is False and the sandbox relies on its rlimits and
seccomp filter for that limit.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from pathlib import Path

PREFIX = "lookahead-sandbox-"
_PROBE_LIMITS = {"memory": 64 << 20, "pids": 64}


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


def own_cgroup(controller: str) -> tuple[Path, str] | None:
    """This process's cgroup directory for `controller` ("memory" or "pids") and its version ("v1" or
    "v2"), or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mounts = _mounts()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            kinds = [(root, point) for root, point, kind, options in mounts if kind == "cgroup" and controller in options]
            version = "v1"
        elif controllers == "":
            kinds = [(root, point) for root, point, kind, _ in mounts if kind == "cgroup2"]
            version = "v2"
        else:
            continue
        for root, point in kinds:
            if path == root or path.startswith(root.rstrip("/") + "/"):
                directory = Path(point) / path[len(root):].lstrip("/")
                if version == "v1" or _delegates(directory, controller):
                    return directory, version
    return None


def _delegates(directory: Path, controller: str) -> bool:
    try:
        return controller in (directory / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


class RunCgroup:
    """One run's cgroups, one directory per hierarchy: `add` bwrap's processes, `remove` them once they are
    gone. `limits` maps each controller to its limit: bytes of memory, or processes and threads."""

    def __init__(self, limits: dict[str, int]):
        hierarchies: dict[tuple[Path, str], list[str]] = {}
        for controller in limits:
            found = own_cgroup(controller)
            if found is None:
                raise OSError(f"no {controller} cgroup of this process was found")
            hierarchies.setdefault(found, []).append(controller)
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self.paths: list[Path] = []
        try:
            for (parent, version), controllers in hierarchies.items():
                path = parent / name
                path.mkdir()
                self.paths.append(path)
                for controller in controllers:
                    self._limit(path, version, controller, limits[controller])
        except OSError:
            self.remove()
            raise

    @staticmethod
    def _limit(path: Path, version: str, controller: str, value: int) -> None:
        if controller == "pids":
            settings = [("pids.max", value, False)]
        elif version == "v1":  # memsw: with swap accounting only
            settings = [("memory.limit_in_bytes", value, False), ("memory.memsw.limit_in_bytes", value, True)]
        else:
            settings = [("memory.max", value, False), ("memory.swap.max", 0, True)]
        for name, number, optional in settings:
            target = path / name
            if not (optional and not target.exists()):
                target.write_text(str(number))

    def add(self, pid: int) -> None:
        for path in self.paths:
            (path / "cgroup.procs").write_text(str(pid))

    def remove(self, wait_s: float = 2.0) -> None:
        """rmdir each, once the processes killed at the end of the run have left it."""
        deadline = time.monotonic() + wait_s
        failed = None
        for path in self.paths:
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as error:
                    if time.monotonic() >= deadline:
                        failed = failed or error  # the others are still removed
                        break
                    time.sleep(0.02)
        if failed is not None:
            raise failed


_AVAILABLE: dict[str, tuple[bool, str]] = {}
_LOCK = threading.Lock()


def available(controller: str = "memory") -> tuple[bool, str]:
    """Whether a cgroup with `controller` can be made and removed here (probed once each), and if not, why."""
    with _LOCK:
        if controller not in _AVAILABLE:
            try:
                RunCgroup({controller: _PROBE_LIMITS[controller]}).remove()
                _AVAILABLE[controller] = (True, "")
            except OSError as error:
                _AVAILABLE[controller] = (False, f"{type(error).__name__}: {error}")
        return _AVAILABLE[controller]
