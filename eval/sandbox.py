"""Running model-written code: a subprocess in a scratch directory, with limits, and no way out.

Layers, outermost first:
- a fresh user and network namespace (`unshare -rn`) where the kernel allows it, so
  the process has no network interface but loopback;
- resource limits set first thing in the child: CPU seconds, address space, file size,
  open files (no preexec_fn: it is unsafe in a process with threads, as ours has);
- a wall-clock limit, after which the whole process group is killed (and always at
  the end, so no child outlives the grading);
- inside the interpreter, an audit hook installed before the untrusted code runs:
  no sockets, no subprocesses, no writes or deletions outside the scratch directory,
  no ctypes. Audit hooks cannot be removed from Python code.
The interpreter runs isolated (`-I`: no user site, no PYTHON* variables) with a
minimal environment and the scratch directory as HOME and cwd.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

GUARD = r'''
import os, resource, sys
for _limit, _value in ((resource.RLIMIT_AS, __MEMORY__), (resource.RLIMIT_CPU, __CPU__), (resource.RLIMIT_FSIZE, 16 << 20),
                       (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(_limit, (_value, _value))
_SCRATCH = os.path.realpath(os.getcwd())
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

def _inside(path):
    try:
        real = os.path.realpath(os.fsdecode(path))
    except Exception:
        return False
    return real == _SCRATCH or real.startswith(_SCRATCH + os.sep)

def _guard(event, args):
    if event.startswith("socket.") or event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
                                                "os.spawn", "os.fork", "os.forkpty", "pty.spawn", "ctypes.dlopen",
                                                "ctypes.dlsym", "ctypes.cdata", "os.kill", "os.killpg"):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags & _WRITE_FLAGS)
        if writing and not isinstance(path, int) and not _inside(path):
            raise PermissionError(f"sandbox: writing {path!r} is not allowed")
    elif event in ("os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
                   "os.symlink", "os.link", "shutil.rmtree", "os.utime"):
        paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
        if not all(_inside(p) for p in paths[:2]):
            raise PermissionError(f"sandbox: {event} outside the scratch directory is not allowed")

sys.addaudithook(_guard)
del _guard
'''


@dataclass(frozen=True)
class SandboxResult:
    passed: bool  # exit status 0 within the limits
    status: str  # passed, failed, timeout
    returncode: int | None
    output: str  # the tail of stdout and stderr


def _can_unshare() -> bool:
    tool = shutil.which("unshare")
    if not tool:
        return False
    try:
        return subprocess.run([tool, "-rn", "true"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_UNSHARE: bool | None = None


def run_python(code: str, timeout_s: float = 10.0, memory_mb: int = 1024) -> SandboxResult:
    """Run `code` as a script in the sandbox; passed means it exited 0 within the limits."""
    global _UNSHARE
    if _UNSHARE is None:
        _UNSHARE = _can_unshare()
    scratch = Path(tempfile.mkdtemp(prefix="lookahead-sandbox-"))
    try:
        guard = GUARD.replace("__MEMORY__", str(memory_mb << 20)).replace("__CPU__", str(max(1, int(timeout_s) + 1)))
        (scratch / "program.py").write_text(guard + "\n" + code, encoding="utf-8")
        command = [sys.executable, "-I", "-B", "program.py"]
        if _UNSHARE:
            command = ["unshare", "-rn", *command]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch), "LANG": "C.UTF-8"}
        process = subprocess.Popen(
            command, cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=timeout_s)
            status = "passed" if process.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            _kill_group(process)
            output, _ = process.communicate()
            status = "timeout"
        finally:
            _kill_group(process)
        text = output.decode("utf-8", "replace")[-2000:]
        return SandboxResult(status == "passed", status, process.returncode, text)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
