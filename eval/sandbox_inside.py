"""What runs inside the sandbox: the limits, the seccomp filter, the audit hook, then the program, or the
grading harness and its candidate.

The grader copies this file into the sandbox and runs it as a script (`python -I -B inside.py CONFIG`,
CONFIG being JSON), so it imports nothing from the project: the project tree is not visible in there.
The grader imports it only for tests. What each part guards against is told in eval/sandbox.py.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import resource
import sys

PROGRAM = "program.py"
OPEN_FILES = 64  # RLIMIT_NOFILE
CLONE_THREAD = 0x00010000
# Calls that hold memory no rlimit counts once it is unmapped (an anonymous file, System V shared memory
# and message queues): refused in every mode, forks or not. Host-named shm_open files need /dev/shm,
# which bwrap's /dev leaves read-only.
MEMORY_CALLS = ("memfd_create", "memfd_secret", "shmget", "msgget")


def set_limits(config: dict, memory: int) -> None:
    """CPU seconds, address space, processes (threads count), file size, open files, no core files."""
    for limit, value in ((resource.RLIMIT_CPU, config["cpu"]), (resource.RLIMIT_AS, memory),
                         (resource.RLIMIT_NPROC, config["nproc"]), (resource.RLIMIT_FSIZE, config["fsize"]),
                         (resource.RLIMIT_NOFILE, OPEN_FILES), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))


def prctl(option: int, *arguments: int) -> int:
    import ctypes

    call = ctypes.CDLL(None, use_errno=True).prctl
    call.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    call.restype = ctypes.c_int
    return call(option, *arguments, *[0] * (4 - len(arguments)))


def seccomp_binding():
    """pyseccomp (libseccomp through ctypes), or None where it or the library is missing: the filter then
    does not load, and the grader's probe says so. Imported before the limits and the fork, because finding
    the library runs `ldconfig -p`."""
    try:
        import pyseccomp
    except (ImportError, OSError, AttributeError):  # AttributeError: pyseccomp loaded without libseccomp.so
        return None
    return pyseccomp


def build_filter(seccomp, fork_ban: bool):
    """The filter: MEMORY_CALLS get EPERM; with `fork_ban`, so do fork, vfork and clone without
    CLONE_THREAD (a thread shares the process's memory and limits), and clone3 gets ENOSYS, its flags being
    out of a filter's reach, so that glibc falls back to clone. System calls of another ABI (i386 or x32 on
    x86_64) get EPERM, all of them. A call this architecture lacks needs no rule."""
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    rules.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.ERRNO(errno.EPERM))
    arch = seccomp.system_arch()

    def refuse(name: str, code: int = errno.EPERM, *conditions) -> None:
        if seccomp.resolve_syscall(arch, name) >= 0:
            rules.add_rule(seccomp.ERRNO(code), name, *conditions)

    for name in MEMORY_CALLS:
        refuse(name)
    if fork_ban:
        refuse("fork")
        refuse("vfork")
        flags = 1 if platform.machine().startswith("s390") else 0  # s390's clone takes the stack first
        refuse("clone", errno.EPERM, seccomp.Arg(flags, seccomp.MASKED_EQ, CLONE_THREAD, 0))
        refuse("clone3", errno.ENOSYS)
    return rules


def install_hook() -> None:
    """A second layer: no sockets, subprocesses, ctypes, signals or writes outside the cwd."""
    scratch = os.path.realpath(os.getcwd())
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    refused = frozenset(("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                         "os.forkpty", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "os.kill",
                         "os.killpg", "_posixsubprocess.fork_exec"))
    changes = frozenset(("os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
                         "os.symlink", "os.link", "shutil.rmtree", "os.utime", "os.mkfifo", "os.mknod",
                         "sqlite3.connect"))

    def inside(path) -> bool:
        try:
            real = os.path.realpath(os.fsdecode(path))
        except Exception:
            return False
        return real == scratch or real.startswith(scratch + os.sep)

    def guard(event: str, args: tuple) -> None:
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


def confine(config: dict, seccomp, memory: int) -> None:
    """The limits, the filter, the hook: in this order, because the hook refuses ctypes, which the filter
    needs, and the limits must bind before anything else runs."""
    set_limits(config, memory)
    if seccomp is not None:
        build_filter(seccomp, config["fork_ban"]).load()  # sets PR_SET_NO_NEW_PRIVS, as a filter needs
    if config["hook"]:
        install_hook()


def run_program() -> dict:
    sys.argv = [PROGRAM]
    with open(PROGRAM, "rb") as file:
        code = compile(file.read(), PROGRAM, "exec")
    scope = {"__name__": "__main__", "__file__": PROGRAM, "__builtins__": __builtins__}
    exec(code, scope)
    return scope


# --- values on the pipes between the harness and the candidate: JSON, containers tagged with their type ---

_TAG_OF = {list: "l", tuple: "t", set: "s", frozenset: "f"}
_TYPE_OF = {tag: kind for kind, tag in _TAG_OF.items()}


def encode(value):
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        return value
    if kind in _TAG_OF:
        return {_TAG_OF[kind]: [encode(item) for item in value]}
    if kind is dict:
        return {"d": [[encode(key), encode(item)] for key, item in value.items()]}
    if kind is bytes:
        return {"b": value.hex()}
    raise TypeError(f"a {kind.__name__} is not a plain value (None, bool, int, float, str, bytes, list, tuple, "
                    "dict, set or frozenset)")


def tagged(pairs: list):
    if len(pairs) == 1:
        tag, payload = pairs[0]
        if tag in _TYPE_OF and type(payload) is list:
            return _TYPE_OF[tag](payload)
        if tag == "d" and type(payload) is list:
            return {key: item for key, item in payload}
        if tag == "b" and type(payload) is str:
            return bytes.fromhex(payload)
    raise ValueError("not a plain value")


def send(fd: int, message) -> None:
    data = json.dumps(message).encode()
    data = len(data).to_bytes(8, "big") + data
    while data:
        data = data[os.write(fd, data):]


def _read(fd: int, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def receive(fd: int, limit: int):
    head = _read(fd, 8)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if size > limit:
        raise ValueError(f"a message of {size} bytes")
    data = _read(fd, size)
    return None if data is None else json.loads(data, object_pairs_hook=tagged)


# --- grading: the harness forks the candidate before it reads anything secret ---------------------------

def serve(calls: int, answers: int, entry: str) -> None:
    """The candidate's side: run the program, then answer calls to its function until the pipe closes."""
    function = run_program().get(entry)  # SystemExit, os._exit or an error here: the harness sees EOF
    while True:
        message = receive(calls, 1 << 30)
        if message is None:
            os._exit(0)
        try:
            if not callable(function):
                raise NameError(f"the code defines no function {entry!r}")
            answer = ["ok", encode(function(*message[1], **message[2]))]
        except Exception as error:  # the harness fails the test with it
            try:
                answer = ["error", f"{type(error).__name__}: {error}"[:2000]]
            except BaseException:
                answer = ["error", "an exception"]
        send(answers, answer)


def harness(grading: dict, call_in: int, answer_out: int) -> None:
    """Read the tests and the token, run the tests against the candidate over the pipes, report the token."""
    parts = []
    while chunk := os.read(grading["harness_fd"], 1 << 16):
        parts.append(chunk)
    os.close(grading["harness_fd"])
    tests = json.loads(b"".join(parts))

    class CandidateError(Exception):
        """The code under test raised, or answered with something that is not a plain value."""

    def candidate(*args, **kwargs):
        try:
            send(call_in, ["call", encode(args), encode(kwargs)])
        except BrokenPipeError:  # it has exited: the same as the end of its answers
            answer = None
        else:
            answer = receive(answer_out, 64 << 20)
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
    exec(compile(tests["setup"], "<prompt>", "exec"), scope)
    scope[tests["entry_point"]] = candidate  # a test that names the function calls the candidate too
    exec(compile(tests["test"], "<test>", "exec"), scope)
    scope["check"](candidate)
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(grading["report_fd"], (tests["token"] + "\n").encode())
    os._exit(0)


def grade(config: dict, seccomp) -> None:
    grading = config["grading"]
    sys.stdout.flush()
    sys.stderr.flush()
    prctl(4, 0)  # PR_SET_DUMPABLE 0: no ptrace, /proc/PID/mem or /proc/PID/fd of the harness for the candidate
    calls, call_in = os.pipe()
    answer_out, answers = os.pipe()
    if os.fork() == 0:  # the candidate: its pipes and stdout/stderr only
        for fd in (grading["harness_fd"], grading["report_fd"], call_in, answer_out):
            os.close(fd)
        confine(config, seccomp, config["memory"])
        serve(calls, answers, grading["entry_point"])
        os._exit(0)
    os.close(calls)
    os.close(answers)
    set_limits(config, config["harness_memory"])
    harness(grading, call_in, answer_out)


def close_other_fds(keep: set[int]) -> None:
    """Nothing the sandbox was started with but stdio and the grading pipes: bwrap inherits the descriptors
    the grader hands it for its own use (--file, --info-fd, --block-fd), and none is the program's."""
    low = 3
    for fd in sorted(keep | {os.sysconf("SC_OPEN_MAX")}):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1


def main(argv: list[str]) -> None:
    config = json.loads(argv[1])
    grading = config.get("grading")
    close_other_fds({0, 1, 2} | ({grading["harness_fd"], grading["report_fd"]} if grading else set()))
    seccomp = seccomp_binding()
    if grading:
        grade(config, seccomp)
    else:
        confine(config, seccomp, config["memory"])
        run_program()


if __name__ == "__main__":
    main(sys.argv)
