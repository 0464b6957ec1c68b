"""The HumanEval sandbox: model-written code graded through the real path cannot reach out.

Every escape attempt is a "solution" graded by `grade_code`. It must grade as failed AND leave
no trace outside: the test checks the effect itself (a canary file, a listener, a process it
started, its own environment, /proc). The attempts run twice: with the audit hook inside
(the real configuration) and with it off, so the bubblewrap boundary is shown to hold alone.
Where an attempt could fail for a dull reason (a typo, a missing tool), a control runs the same
route against the sandbox's own scratch directory and must pass: the route works, the
boundary is what stops it.
"""

import errno
import json
import os
import resource
import shutil
import socket
import stat
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from conftest import SHARED_DATA
from lookahead_reasoning.eval import sandbox, sandbox_bwrap, sandbox_cgroup, sandbox_inside
from lookahead_reasoning.eval.datasets import Problem
from lookahead_reasoning.eval.graders import grade, grade_code
from lookahead_reasoning.eval.sandbox import SandboxUnavailable, run_python
from lookahead_reasoning.errors import LookaheadError


@pytest.fixture(autouse=True)
def bwrap_runs(request):
    """Tests of the boundary need bubblewrap; those that fake its absence (`no_bwrap`) do not."""
    if "no_bwrap" not in request.fixturenames:
        ok, why = sandbox.sandbox_available()
        if not ok:
            pytest.skip(f"bubblewrap cannot run here: {why}")


IDENTITY = Problem(
    id="HumanEval/identity", message="m", grader="code",
    extra={"prompt": "def f(x):\n", "test": "def check(c):\n    assert c(1) == 1\n    assert c(7) == 7\n", "entry_point": "f"},
)
RIGHT = "def f(x):\n    return x\n"


def solution(body: str) -> str:
    """A model answer: `body` at module level, then a correct f (so only `body` can make it fail)."""
    return f"```python\nimport os, sys, signal\n{textwrap.dedent(body)}\n{RIGHT}```"


def graded(body: str, timeout_s: float = 10.0, **kwargs):
    return grade_code(IDENTITY, solution(body), timeout_s=timeout_s, **kwargs)


@pytest.fixture(params=["hook+bwrap", "bwrap-only"])
def layers(request, monkeypatch):
    """All layers, or bubblewrap alone: no audit hook and no seccomp filter against new processes."""
    monkeypatch.setattr(sandbox, "AUDIT_HOOK", request.param == "hook+bwrap")
    monkeypatch.setattr(sandbox, "FORK_BAN", request.param == "hook+bwrap")
    return request.param


@pytest.fixture
def outside(tmp_path):
    """A host directory the sandbox must not change: one it sees read-only where the test can
    make one (under the interpreter's prefix, which is bound in), else one it cannot see."""
    _, roots = sandbox_bwrap.interpreter()
    for root in [*roots, "/usr/local/share"]:
        if os.path.isdir(root) and os.access(root, os.W_OK):
            made = Path(root) / f"lookahead-canary-{uuid.uuid4().hex[:12]}"
            made.mkdir()
            try:
                yield made
            finally:
                shutil.rmtree(made, ignore_errors=True)
            return
    yield tmp_path


# --- process creation and writes, by every route ---------------------------------------------------

# Each body makes `{target}` exist (or, for unlink/rename, disappear) and fails loudly when it cannot.
SPAWN_ROUTES = {
    "subprocess": """
        import subprocess
        subprocess.run(["/bin/sh", "-c", "touch {target}"], check=True)
    """,
    "os.system": """
        assert os.system("touch {target}") == 0
    """,
    "fork+exec": """
        pid = os.fork()
        if pid == 0:
            try:
                os.execv("/bin/sh", ["sh", "-c", "touch {target}"])
            finally:
                os._exit(127)
        assert os.waitpid(pid, 0)[1] == 0
    """,
    "_posixsubprocess.fork_exec": """
        import _posixsubprocess
        r, w = os.pipe()
        pid = _posixsubprocess.fork_exec([b"/bin/sh", b"-c", b"touch {target}"], [b"/bin/sh"], True, (w,), None, None,
                                         -1, -1, -1, -1, -1, -1, r, w, False, False, -1, None, None, None, -1, None, False)
        os.close(w)
        assert os.waitpid(pid, 0)[1] == 0
    """,
    "multiprocessing spawn": """
        import multiprocessing
        process = multiprocessing.get_context("spawn").Process(target=os.system, args=("touch {target}",))
        process.start()
        process.join()
        assert process.exitcode == 0 and os.path.exists("{target}")
    """,
    "ctypes libc system": """
        import ctypes
        assert ctypes.CDLL(None).system(b"touch {target}") == 0
    """,
    "cffi libc system": """
        import cffi
        ffi = cffi.FFI()
        ffi.cdef("int system(const char *command);")
        assert ffi.dlopen(None).system(b"touch {target}") == 0
    """,
}

WRITE_ROUTES = {
    "open": """
        open("{target}", "w").write("escaped")
    """,
    "dir_fd/openat": """
        directory = os.open(os.path.dirname("{target}"), os.O_RDONLY | os.O_DIRECTORY)
        os.close(os.open(os.path.basename("{target}"), os.O_CREAT | os.O_WRONLY, dir_fd=directory))
    """,
    "mkfifo": """
        os.mkfifo("{target}")
    """,
    "sqlite3": """
        import sqlite3
        connection = sqlite3.connect("{target}")
        connection.execute("create table t (x)")
        connection.commit()
    """,
}

REMOVE_ROUTES = {
    "unlink": """
        os.unlink("{target}")
    """,
    "rename": """
        os.rename("{target}", "{target}.moved")
        assert not os.path.exists("{target}")
    """,
}


def _needs(route: str) -> None:
    if route.startswith("cffi"):
        pytest.importorskip("cffi", reason="cffi is not installed")


@pytest.mark.parametrize("route", [*SPAWN_ROUTES, *WRITE_ROUTES])
def test_no_route_creates_anything_outside_the_scratch_directory(route, layers, outside):
    _needs(route)
    body = {**SPAWN_ROUTES, **WRITE_ROUTES}[route]
    canary = outside / f"canary-{uuid.uuid4().hex[:8]}"
    result = graded(body.format(target=canary))
    assert result.correct is False, result.detail
    assert not os.path.lexists(canary)
    assert list(outside.iterdir()) == []
    if layers == "bwrap-only":  # the route itself works: inside the scratch directory it passes
        control = graded(body.format(target=f"/tmp/control-{uuid.uuid4().hex[:8]}"))
        assert control.correct is True, control.detail


@pytest.mark.parametrize("route", list(REMOVE_ROUTES))
def test_no_route_deletes_or_moves_a_file_outside(route, layers, outside):
    canary = outside / "keep.txt"
    canary.write_text("keep")
    result = graded(REMOVE_ROUTES[route].format(target=canary))
    assert result.correct is False, result.detail
    assert canary.read_text() == "keep" and sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    if layers == "bwrap-only":
        inside = "/tmp/keep.txt"
        control = graded(f"open({inside!r}, 'w').close()\n" + textwrap.dedent(REMOVE_ROUTES[route]).format(target=inside))
        assert control.correct is True, control.detail


def test_the_host_tree_is_not_even_visible(tmp_path, layers):
    (tmp_path / "secret.txt").write_text("host data")
    project = Path(__file__).resolve().parents[1]
    result = graded(f"""
        for path in ({str(tmp_path / 'secret.txt')!r}, {str(project / 'pyproject.toml')!r}, "/root/.bash_history"):
            assert not os.path.exists(path), path
        raise SystemExit("nothing of the host's tree is here")
    """)
    assert result.correct is False and "nothing of the host" in result.detail


# --- switching the audit hook off does not open the boundary -----------------------------------------

GC_SWAP = """
    import gc
    def replacement(freevars):
        names = list(freevars) or ["unused"]
        source = "def outer():\\n" + "".join(f"    {{n}} = None\\n" for n in names)
        source += "    def g(*a):\\n        (" + ", ".join(names) + ",)\\n        return True\\n    return g\\n"
        scope = {{}}
        exec(source, scope)
        return scope["outer"]().__code__
    for thing in gc.get_objects():
        if callable(thing) and getattr(thing, "__name__", "") in ("guard", "_guard", "inside", "_inside"):
            code = getattr(thing, "__code__", None)
            if code is not None:
                thing.__code__ = replacement(code.co_freevars) if code.co_freevars else (lambda *a: True).__code__
    import subprocess
    subprocess.run(["/bin/sh", "-c", "touch {target}"], check=True)
"""

REBIND = """
    import __main__
    for name in ("_inside", "_guard"):
        setattr(__main__, name, lambda *a: True)
        globals()[name] = lambda *a: True
    open("{target}", "w").write("escaped")
"""


@pytest.mark.parametrize("attack", ["gc code swap", "helper rebinding"])
def test_switching_the_audit_hook_off_does_not_open_the_boundary(attack, outside, monkeypatch):
    monkeypatch.setattr(sandbox, "FORK_BAN", False)  # bubblewrap and the hook, which the attack switches off
    body = GC_SWAP if attack == "gc code swap" else REBIND
    canary = outside / "canary"
    result = graded(body.format(target=canary))
    assert result.correct is False, result.detail
    assert not os.path.lexists(canary)
    if attack == "gc code swap":  # the hook really is off: a subprocess runs, writing inside succeeds
        control = graded(body.format(target="/tmp/control"))
        assert control.correct is True, control.detail


# --- other processes, the network, the environment -----------------------------------------------------

@pytest.fixture
def victim():
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


@pytest.mark.parametrize("route", ["os.kill", "os.killpg", "pidfd_send_signal"])
def test_an_unrelated_process_cannot_be_signalled(route, layers, victim):
    body = {
        "os.kill": f"os.kill({victim.pid}, signal.SIGKILL)",
        "os.killpg": f"os.killpg(os.getpgid({victim.pid}), signal.SIGKILL)",
        "pidfd_send_signal": f"signal.pidfd_send_signal(os.pidfd_open({victim.pid}), signal.SIGKILL)",
    }[route]
    result = graded(body)
    assert result.correct is False, result.detail
    time.sleep(0.05)
    assert victim.poll() is None  # still alive


def test_the_network_is_unreachable(layers):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        result = graded(f"""
            import socket
            connection = socket.create_connection(("127.0.0.1", {port}), timeout=2)
            connection.sendall(b"escaped")
        """)
        assert result.correct is False, result.detail
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing ever connected, not even briefly
            listener.accept()
    finally:
        listener.close()


def test_the_parents_environment_is_not_visible(layers, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("LOOKAHEAD_SANDBOX_SECRET", secret)
    result = graded("""
        import glob
        seen = repr(dict(os.environ))
        for path in glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline"):
            try:
                seen += open(path, "rb").read().decode("latin-1")
            except OSError:
                pass
        assert "LOOKAHEAD_SANDBOX_SECRET" in seen
    """)
    assert result.correct is False
    assert secret not in result.detail
    names = run_python("import os\nprint(' '.join(sorted(os.environ)))").stdout.split()
    assert {"HOME", "PATH", "TMPDIR"} <= set(names) <= {"HOME", "PATH", "TMPDIR", "PWD", "LC_CTYPE"}


# --- nothing outlives the grading ------------------------------------------------------------------

def _processes_with(argv: bytes) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if argv in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_a_setsid_grandchild_does_not_survive_or_hold_the_pipe(layers):
    mark = f"61.{uuid.uuid4().int % 10**9:09d}"
    started = time.monotonic()
    result = graded(f"""
        import time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/bin/sleep", ["sleep", "{mark}"])  # keeps stdout and stderr open
            os._exit(0)
        time.sleep(0.3)
        here = [p for p in os.listdir("/proc") if p.isdigit() and b"{mark}" in open(f"/proc/{{p}}/cmdline", "rb").read()]
        assert not here, "the grandchild is running and holds the pipe"
    """)
    assert result.correct is False
    assert time.monotonic() - started < 5  # not held up by the pipe
    deadline = time.monotonic() + 2
    while _processes_with(b"sleep\0" + mark.encode()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(b"sleep\0" + mark.encode()) == []
    if layers == "bwrap-only":
        assert "the grandchild is running" in result.detail  # it was started, and then it died with the sandbox


# --- output, early exits, time -------------------------------------------------------------------------

def test_a_gigabyte_of_output_is_cut_off_and_the_grader_stays_small():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, the peak so far
    started = time.monotonic()
    result = graded("""
        chunk = "x" * (1 << 20)
        for _ in range(1024):
            sys.stdout.write(chunk)
    """)
    assert result.correct is False and "output-limit" in result.detail
    assert time.monotonic() - started < 10
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 300 * 1024


@pytest.mark.parametrize("exit_call", ["os._exit(0)", "sys.exit(0)", "raise SystemExit"])
@pytest.mark.parametrize("where", ["module", "function"])
def test_exiting_0_before_a_failing_assert_fails(exit_call, where):
    if where == "module":
        answer = f"```python\nimport os, sys\ndef f(x):\n    return x + 1\n{exit_call}\n```"
    else:
        answer = f"```python\nimport os, sys\ndef f(x):\n    {exit_call}\n```"
    result = grade_code(IDENTITY, answer)
    assert result.correct is False
    assert "exited before the tests finished" in result.detail


def test_printing_a_fake_token_does_not_pass():
    answer = "```python\nimport os\nprint('0' * 32)\nos._exit(0)\n```"
    assert grade_code(IDENTITY, answer).correct is False


def test_an_endless_loop_is_killed_by_the_wall_clock():
    started = time.monotonic()
    result = graded("while True:\n    pass\n", timeout_s=1)
    assert result.correct is False and "timeout" in result.detail
    assert time.monotonic() - started < 6


def test_a_sleeping_loop_is_killed_too():  # no CPU used: only the wall clock stops it
    started = time.monotonic()
    result = graded("import time\nwhile True:\n    time.sleep(1)\n", timeout_s=1)
    assert result.correct is False and "timeout" in result.detail
    assert time.monotonic() - started < 6


# --- what must still work --------------------------------------------------------------------------

def test_a_correct_solution_passes(layers):
    assert grade_code(IDENTITY, f"```python\n{RIGHT}```").correct is True
    body_only = "```python\n    return x\n```"
    assert grade_code(IDENTITY, body_only).correct is True
    uses_scratch = solution("""
        import json, tempfile
        with tempfile.NamedTemporaryFile("w", delete=False) as handle:
            json.dump([1, 2], handle)
        print("some output without a newline", end="")
    """)
    result = grade_code(IDENTITY, uses_scratch)
    assert result.correct is True, result.detail


def test_plain_code_passes_and_a_failing_assert_fails():
    assert run_python("print(sum(range(10)))").passed
    result = run_python("assert 1 == 2, 'nope'")
    assert not result.passed and result.status == "failed" and "nope" in result.output


def test_memory_is_limited():
    result = run_python("x = bytearray(4 << 30)\n", memory_mb=512)
    assert not result.passed and "MemoryError" in result.output


def test_a_humaneval_answer_that_misbehaves_is_graded_wrong(tmp_path):
    problem = Problem(
        id="HumanEval/y", message="m", grader="code",
        extra={"prompt": "def f(x):\n", "test": "def check(c):\n    assert c(1) == 1\n", "entry_point": "f"},
    )
    sneaky = f"```python\ndef f(x):\n    open({str(tmp_path / 'out.txt')!r}, 'w').write('x')\n    return x\n```"
    assert grade(problem, sneaky).correct is False
    assert not (tmp_path / "out.txt").exists()
    endless = "```python\ndef f(x):\n    while True:\n        pass\n```"
    assert grade_code(problem, endless, timeout_s=1).correct is False


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"),
                    reason="dropping to nobody applies to a root grader with a world-readable interpreter")
def test_as_root_with_a_reachable_interpreter_the_process_limit_binds(monkeypatch):
    """RLIMIT_NPROC does not bind host root; bwrap then runs as nobody, where it does (the seccomp filter,
    which refuses every fork, is off here to show that)."""
    monkeypatch.setattr(sandbox_bwrap, "interpreter", lambda: (os.path.realpath("/usr/bin/python3"), []))
    monkeypatch.setattr(sandbox, "AUDIT_HOOK", False)
    monkeypatch.setattr(sandbox, "FORK_BAN", False)
    result = run_python(textwrap.dedent("""
        import os, time
        print("uid", os.getuid())
        for n in range(200):
            if os.fork() == 0:
                time.sleep(3)
                os._exit(0)
    """))
    assert "uid 65534" in result.stdout
    assert not result.passed and "Resource temporarily unavailable" in result.output


# --- the pass cannot be forged ----------------------------------------------------------------------

HUMANEVAL_ADD = Problem(
    id="HumanEval/add", message="m", grader="code",
    extra={"prompt": "import math\n\n\ndef add(a: int, b: int) -> int:\n    \"\"\"Add two numbers.\"\"\"\n",
           "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
           "entry_point": "add"},
)

# Called as the function under test, when the harness holds the token: looks for a 32-hex-digit token
# wherever the code can read (its file, /proc of every process it sees, memory of theirs by their maps,
# their descriptors, its own descriptors and objects), prints what it found, writes it to every descriptor
# it can, and exits 0: the audit's forgery, and every other place the token could be.
TOKEN_HUNT = r"""
import gc, glob, os, re, sys
def add(a, b):
    hex32 = re.compile(rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")
    found, budget = set(), [256 << 20]
    def look(data):
        if isinstance(data, str):
            data = data.encode("utf-8", "replace")
        found.update(m.decode() for m in hex32.findall(data))
    def read(path, start=0, size=1 << 20):
        try:
            with open(path, "rb", buffering=0) as handle:
                os.set_blocking(handle.fileno(), False)
                if start:
                    handle.seek(start)
                look(handle.read(size) or b"")
        except (OSError, ValueError, OverflowError):
            pass
    read("program.py")
    for pattern in ("/proc/*/cmdline", "/proc/*/environ", "/proc/*/fd/*", "/tmp/*", "/tmp/.*"):
        for path in glob.glob(pattern):
            read(path)
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            regions = open(maps).read().splitlines()
        except OSError:
            continue
        for region in regions:
            fields = region.split()
            low, high = (int(x, 16) for x in fields[0].split("-"))
            if fields[1].startswith("r") and budget[0] > 0:
                size = min(high - low, budget[0])
                budget[0] -= size
                read(maps[:-4] + "mem", low, size)
    for fd in range(3, 64):
        try:
            os.lseek(fd, 0, 0)
        except OSError:
            pass
        try:
            os.set_blocking(fd, False)
            look(os.read(fd, 1 << 20))
        except OSError:
            pass
    for thing in gc.get_objects():
        values = thing.values() if isinstance(thing, dict) else thing if isinstance(thing, (list, tuple)) else ()
        for value in values:
            if isinstance(value, (str, bytes)) and len(value) < 1 << 16:
                look(value)
    print("found", len(found), flush=True)
    for token in found:
        print(token, flush=True)
        for fd in range(1, 64):
            try:
                os.write(fd, (token + "\\n").encode())
            except OSError:
                pass
    os._exit(0)
"""


@pytest.mark.parametrize("layers_off", [False, True])
def test_the_pass_token_cannot_be_forged(layers_off, monkeypatch):
    if layers_off:  # the boundary alone: no audit hook in the way of the hunt
        monkeypatch.setattr(sandbox, "AUDIT_HOOK", False)
    forged = ("```python\nimport os, re\nfor t in re.findall(r\"'([0-9a-f]{32})'\", open('program.py').read()):\n"
              "    print(t, flush=True)\ndef add(a, b):\n    return a - b\nos._exit(0)\n```")
    result = grade(HUMANEVAL_ADD, forged)
    assert result.correct is False and "exited before the tests finished" in result.detail
    hunt = grade(HUMANEVAL_ADD, f"```python\n{TOKEN_HUNT}```")
    assert hunt.correct is False, hunt.detail
    if layers_off:
        assert "found 0" in hunt.detail, hunt.detail
    assert grade(HUMANEVAL_ADD, "```python\ndef add(a, b):\n    return a + b\n```").correct is True


@pytest.mark.parametrize("answer", [
    "class Anything:\n    def __eq__(self, other):\n        return True\n\ndef add(a, b):\n    return Anything()\n",
    "class Five(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n\n"
    "def add(a, b):\n    return Five(0)\n",
    "class Items(list):\n    def __eq__(self, other):\n        return True\n\ndef add(a, b):\n    return Items()\n",
])
def test_an_answer_that_claims_to_equal_anything_fails(answer):
    result = grade(HUMANEVAL_ADD, f"```python\n{answer}```")
    assert result.correct is False, result.detail


def test_the_tests_use_the_prompts_helpers_not_the_answers():
    """HumanEval/38 and /50 test decode with the prompt's encode: an answer that redefines encode as the
    identity, and decode too, must not pass."""
    problem = Problem(
        id="HumanEval/helper", message="m", grader="code",
        extra={"prompt": "def encode(s: str) -> str:\n    return s[::-1]\n\n\ndef decode(s: str) -> str:\n"
                         "    \"\"\"Undo encode.\"\"\"\n",
               "test": "def check(candidate):\n    assert candidate(encode('abc')) == 'abc'\n", "entry_point": "decode"},
    )
    cheat = "```python\ndef encode(s):\n    return s\n\n\ndef decode(s):\n    return s\n```"
    assert grade(problem, cheat).correct is False
    assert grade(problem, "```python\ndef decode(s):\n    return s[::-1]\n```").correct is True


def test_the_tests_builtins_are_out_of_the_answers_reach():
    problem = Problem(
        id="HumanEval/half", message="m", grader="code",
        extra={"prompt": "def half(x: float) -> float:\n    \"\"\"Half of x.\"\"\"\n",
               "test": "def check(candidate):\n    assert abs(candidate(2.0) - 1.0) < 1e-6\n", "entry_point": "half"},
    )
    cheat = "```python\nimport builtins\nbuiltins.abs = lambda x: 0\n\ndef half(x):\n    return 7.0\n```"
    assert grade(problem, cheat).correct is False
    assert grade(problem, "```python\ndef half(x):\n    return x / 2\n```").correct is True


def test_the_code_under_test_never_sees_the_tests():
    peek = ("```python\nimport glob, os\ntext = open('program.py').read() + ''.join(open(p, errors='replace').read() "
            "for p in glob.glob('/tmp/*') if os.path.isfile(p))\nassert 'che' + 'ck(' not in text and 'candi' + 'date' not in text, 'the tests'\n"
            "def add(a, b):\n    return a + b\n```")
    result = grade(HUMANEVAL_ADD, peek)
    assert result.correct is True, result.detail


@pytest.mark.skipif(not (SHARED_DATA / "humaneval.jsonl").exists(), reason="needs ../shared/data/humaneval.jsonl")
def test_every_canonical_humaneval_solution_passes_through_the_harness():
    """Tests call the function across the pipe, with the prompt's helpers beside them: nothing right fails."""
    from lookahead_reasoning.eval.datasets import load_problems

    records = {r["task_id"]: r for r in map(json.loads, (SHARED_DATA / "humaneval.jsonl").read_text().splitlines())}
    problems = load_problems("humaneval", SHARED_DATA / "humaneval.jsonl")
    failed = [p.id for p in problems if not grade_code(p, f"```python\n{records[p.id]['canonical_solution']}```").correct]
    assert len(problems) == 164 and failed == []


# --- processes and memory: the limits bind for root too -------------------------------------------

FORK_BOMB = """
import os, time
children = 0
for _ in range(300):
    try:
        pid = os.fork()
    except OSError as error:
        print("refused", error.errno)
        break
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    children += 1
print("children", children)
"""


def test_a_fork_bomb_gets_no_process_whoever_runs_the_grader(monkeypatch):
    """As root with an interpreter others cannot read, bwrap runs as root, where RLIMIT_NPROC does not
    bind: the seccomp filter refuses the first fork all the same (and for any other user)."""
    monkeypatch.setattr(sandbox, "AUDIT_HOOK", False)  # the filter alone
    result = run_python(FORK_BOMB)
    assert "children 0" in result.stdout and "refused 1" in result.stdout, result.output  # EPERM
    for route in SPAWN_ROUTES:  # every route, even where it only touches the scratch directory
        result = graded(SPAWN_ROUTES[route].format(target=f"/tmp/control-{uuid.uuid4().hex[:8]}"))
        assert result.correct is False, (route, result.detail)
    if sandbox_cgroup.available("pids")[0] or not sandbox_bwrap.runs_as_root():
        assert sandbox.limits_warning() is None
    else:  # threads still start, and as root nothing counts them
        assert "binds only non-root uids" in sandbox.limits_warning()


PROCESS_FLOOD = """
import os, subprocess, time
started, refused = 0, []
for _ in range(100):
    try:
        if {route!r} == "subprocess":
            subprocess.Popen(["sleep", "5"])
        elif os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        started += 1
    except OSError as error:
        refused.append(error.errno)
alive = sum(entry.isdigit() for entry in os.listdir("/proc"))  # every process of the sandbox's PID namespace
print("uid", os.getuid(), "started", started, "alive", alive, "refused", len(refused), *sorted(set(refused)))
"""


@pytest.mark.parametrize("route", ["os.fork", "subprocess"])
def test_the_process_limit_binds_a_sandbox_that_runs_as_root(route, monkeypatch):
    """RLIMIT_NPROC does not bind host root, so with the fork filter off only the run's pids cgroup holds the
    sandbox to the process limit, whatever the uid: the children beyond it get EAGAIN."""
    ok, why = sandbox_cgroup.available("pids")
    if not ok:
        pytest.skip(f"no pids cgroup can be made here ({why}): the process limit then binds only non-root uids")
    monkeypatch.setattr(sandbox_bwrap, "run_as", lambda: None)  # as root: bwrap runs as host root
    monkeypatch.setattr(sandbox, "AUDIT_HOOK", False)
    monkeypatch.setattr(sandbox, "FORK_BAN", False)
    result = run_python(PROCESS_FLOOD.format(route=route), timeout_s=30)
    assert result.passed, result.output
    words = result.stdout.split()
    uid, started, alive, refused = (int(words[words.index(name) + 1]) for name in ("uid", "started", "alive", "refused"))
    if os.geteuid() == 0:
        assert uid == 0  # bwrap maps its uid to itself: host root
    assert 0 < started < alive <= sandbox.PROCESSES, result.output  # the filter is off: some did start
    assert started + refused == 100 and words[-1] == str(errno.EAGAIN), result.output
    parent, _ = sandbox_cgroup.own_cgroup("pids")
    assert not list(parent.glob(f"{sandbox_cgroup.PREFIX}{os.getpid()}-*"))  # removed with the run


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_run_has_one_cgroup_directory_per_hierarchy(version, tmp_path, monkeypatch):
    """A process is in one v2 cgroup, so both limits go on one directory there; v1 has a hierarchy per
    controller, and bwrap's processes join each."""
    parents = {c: tmp_path / (c if version == "v1" else "unified") for c in ("memory", "pids")}
    for parent in parents.values():
        parent.mkdir(exist_ok=True)
    monkeypatch.setattr(sandbox_cgroup, "own_cgroup", lambda controller: (parents[controller], version))
    cgroup = sandbox_cgroup.RunCgroup({"memory": 5 << 20, "pids": 7})
    assert len(cgroup.paths) == (2 if version == "v1" else 1)
    cgroup.add(1234)
    memory = "memory.limit_in_bytes" if version == "v1" else "memory.max"
    assert (cgroup.paths[0] / memory).read_text() == str(5 << 20)
    assert (cgroup.paths[-1] / "pids.max").read_text() == "7"
    assert all((path / "cgroup.procs").read_text() == "1234" for path in cgroup.paths)


def test_without_a_pids_cgroup_a_root_sandbox_is_warned_about(monkeypatch):
    monkeypatch.setitem(sandbox_cgroup._AVAILABLE, "pids", (False, "OSError: no pids cgroup"))
    monkeypatch.setattr(sandbox_bwrap, "runs_as_root", lambda: True)
    monkeypatch.setattr(sandbox, "_FORKS_REFUSED", True)
    refused = sandbox.limits_warning()
    assert refused and "\n" not in refused and "binds only non-root uids" in refused and "not threads" in refused
    monkeypatch.setattr(sandbox, "_FORKS_REFUSED", False)
    monkeypatch.setattr(sandbox, "FORK_BAN", False)
    allowed = sandbox.limits_warning()
    assert allowed and "\n" not in allowed and "binds only non-root uids" in allowed and "nothing bounds" in allowed
    monkeypatch.setattr(sandbox_bwrap, "runs_as_root", lambda: False)  # RLIMIT_NPROC binds other uids
    assert "RLIMIT_NPROC holds them to 32" in sandbox.limits_warning()


def test_the_memory_limit_counts_the_whole_sandbox(monkeypatch):
    """Two children of 400 MiB each held 800 MiB under a 512 MiB limit per process; now there are none,
    and the threads of the one process share its limit."""
    monkeypatch.setattr(sandbox, "AUDIT_HOOK", False)
    result = run_python(textwrap.dedent("""
        import os, threading, time
        held = 0
        for _ in range(2):
            try:
                pid = os.fork()
            except OSError:
                continue
            if pid == 0:
                block = bytearray(400 << 20)
                time.sleep(2)
                os._exit(0)
            held += 400
        blocks = []
        def grab():
            try:
                blocks.append(bytearray(200 << 20))
            except MemoryError:
                pass
        threads = [threading.Thread(target=grab) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print("held", held + 200 * len(blocks))
    """), memory_mb=512)
    held = int(result.stdout.split("held")[1].split()[0])
    assert held <= 512, result.output


def test_where_forks_cannot_be_refused_eval_says_so_first(monkeypatch, sim_servers, tmp_path, capsys):
    from cli_invoke import invoke

    monkeypatch.setattr(sandbox, "_PROBE", None)  # probed again below, and both findings restored after
    monkeypatch.setattr(sandbox, "_FORKS_REFUSED", sandbox._FORKS_REFUSED)
    monkeypatch.setattr(sandbox, "FORK_BAN", False)  # as where the filter does not load
    warning = sandbox.limits_warning()
    assert warning and "\n" not in warning and "can start processes" in warning
    assert ("cgroup bounds them together" if sandbox_cgroup.available("memory")[0] else "per process") in warning
    assert "pids cgroup holds them" in warning if sandbox_cgroup.available("pids")[0] else "RLIMIT_NPROC" in warning
    monkeypatch.setattr(sandbox, "AUDIT_HOOK", False)
    result = run_python("import os\nif os.fork() == 0:\n    os._exit(0)\nos.wait()\nprint('forked')\n")
    assert result.stdout == "forked\n", result.output  # what the warning is about
    monkeypatch.setattr(sandbox, "AUDIT_HOOK", True)
    data = tmp_path / "he.jsonl"
    data.write_text(json.dumps({"task_id": "HumanEval/0", "prompt": "def f(x):\n", "entry_point": "f",
                                "test": "def check(c):\n    assert c(1) == 1\n"}) + "\n")
    with sim_servers() as sims:
        outcome = invoke(capsys, "eval", "--dataset", "humaneval", "--data", str(data), "--methods", "ar",
                         "--threshold", "0.5", "--out", str(tmp_path / "out"), "--draft-url", sims.draft.url,
                         "--target-url", sims.target.url, "--judge-url", sims.judge.url, "--chat-template", "chatml")
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stderr.splitlines()[0] == f"warning: {warning}"


# --- one memory limit for everything the candidate runs ----------------------------------------------

MEMFD_HOARD = """
import os
held = 0
for _ in range(60):  # RLIMIT_FSIZE caps each file, RLIMIT_NOFILE their number: about 1 GiB in all
    try:
        fd = os.memfd_create("hoard")
    except OSError as error:
        print("refused", error.errno)
        break
    try:
        while True:
            held += os.write(fd, b"x" * (1 << 20)) >> 20
    except OSError:  # EFBIG at the file-size limit
        pass
print("held", held)
"""


def test_anonymous_files_hold_no_memory_beyond_the_limit(monkeypatch):
    """memfd pages are not in RLIMIT_AS once unmapped: memfd_create is refused, with or without the fork
    filter, and POSIX shared memory finds /dev/shm read-only."""
    monkeypatch.setattr(sandbox, "AUDIT_HOOK", False)  # the boundary alone
    monkeypatch.setattr(sandbox, "FORK_BAN", False)
    result = run_python(MEMFD_HOARD, memory_mb=256)
    assert "held 0" in result.stdout and "refused 1" in result.stdout, result.output
    shared = run_python("from multiprocessing import shared_memory\nshared_memory.SharedMemory(create=True, size=1 << 26)\n")
    assert not shared.passed and ("Read-only file system" in shared.output or "Permission denied" in shared.output)


HOARDERS = """
import os, time
reports, report = os.pipe()
go, release = os.pipe()
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        os.close(reports)
        held = bytearray()
        try:
            while len(held) < ({mb} - 64) << 20:
                held += b"x" * (16 << 20)  # written, so the pages are really held
        except MemoryError:
            pass
        os.write(report, (len(held) >> 20).to_bytes(4, "big"))
        os.close(report)  # the reports end when every child has written or died
        os.read(go, 1)
        os._exit(0)
    children.append(pid)
os.close(report)
sizes = []
while len(sizes) < len(children) and (chunk := os.read(reports, 4)):
    sizes.append(int.from_bytes(chunk, "big"))
os.write(release, b"x" * len(children))
lived = sum(os.waitpid(pid, 0)[1] == 0 for pid in children)
print("held", sum(sizes) if lived == len(children) else sum(sorted(sizes)[:lived]), "lived", lived)
"""


@pytest.mark.skipif(not sandbox_cgroup.available("memory")[0], reason="no memory cgroup can be made here: without the fork "
                    "filter the bound is then PROCESSES x memory_mb, each process under its own RLIMIT_AS")
def test_processes_share_one_memory_limit_without_the_fork_filter(monkeypatch):
    """Four children, each filling its own address-space limit, held four times it; the cgroup bounds their
    sum."""
    monkeypatch.setattr(sandbox, "AUDIT_HOOK", False)
    monkeypatch.setattr(sandbox, "FORK_BAN", False)
    memory_mb = 256
    result = run_python(HOARDERS.format(mb=memory_mb), memory_mb=memory_mb, timeout_s=30)
    held = int(result.stdout.split("held")[1].split()[0])
    assert held <= memory_mb + sandbox.HARNESS_MB, result.output


def test_the_filter_refuses_memory_calls_and_other_abis():
    seccomp = sandbox_inside.seccomp_binding()
    assert seccomp is not None, "pyseccomp is a dependency"
    import tempfile

    with tempfile.TemporaryFile("w+") as pfc:
        sandbox_inside.build_filter(seccomp, fork_ban=True).export_pfc(pfc)
        pfc.seek(0)
        text = pfc.read()
    for name in ("memfd_create", "shmget", "msgget", "clone3", "clone"):
        assert f'"{name}"' in text, text
    assert "invalid architecture action\naction ERRNO(1)" in text


@pytest.mark.parametrize("value", [None, True, 3, 2.5, "s", b"\x00b", [1, (2, 3)], {"k": {1, 2}}, frozenset({4})])
def test_plain_values_cross_the_pipe_with_their_exact_type(value):
    read, write = os.pipe()
    try:
        sandbox_inside.send(write, sandbox_inside.encode(value))
        back = sandbox_inside.receive(read, 1 << 20)
    finally:
        os.close(read)
        os.close(write)
    assert back == value and type(back) is type(value)


# --- no bubblewrap: refuse, unless told to run unsafely ---------------------------------------------

@pytest.fixture
def no_bwrap(tmp_path, monkeypatch):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sandbox_bwrap, "bwrap_binary", lambda: str(fake))
    monkeypatch.setattr(sandbox, "_PROBE", None)


def test_without_bubblewrap_grading_code_refuses_in_one_line(no_bwrap):
    with pytest.raises(SandboxUnavailable) as refused:
        grade_code(IDENTITY, f"```python\n{RIGHT}```")
    message = str(refused.value)
    assert isinstance(refused.value, LookaheadError) and "\n" not in message
    assert "uid map" in message and "--unsafe-no-sandbox" in message
    with pytest.raises(SandboxUnavailable):  # what `run_eval` calls before any model is asked
        sandbox.require_sandbox()


def test_unsafe_no_sandbox_runs_the_old_way_with_a_warning(no_bwrap, monkeypatch):
    monkeypatch.setattr(sandbox, "_WARNED", False)
    with pytest.warns(RuntimeWarning, match="WITHOUT a sandbox"):
        assert grade_code(IDENTITY, f"```python\n{RIGHT}```", unsafe_no_sandbox=True).correct is True
    early = "```python\nimport os\ndef f(x):\n    return 0\nos._exit(0)\n```"
    assert grade_code(IDENTITY, early, unsafe_no_sandbox=True).correct is False
    flood = solution("chunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\n")
    assert "output-limit" in grade_code(IDENTITY, flood, unsafe_no_sandbox=True).detail
    assert grade(IDENTITY, f"```python\n{RIGHT}```", unsafe_no_sandbox=True).correct is True


def test_the_cli_offers_unsafe_no_sandbox(capsys, no_bwrap):
    from cli_invoke import invoke

    outcome = invoke(capsys, "eval", "--help")
    assert outcome.returncode == 0 and "--unsafe-no-sandbox" in outcome.stdout.replace("\n", "")
