"""The sandbox stops model-written code that reaches out, writes outside its scratch directory or runs forever."""

import socket
import textwrap
import threading
import time

from lookahead_reasoning.eval.datasets import Problem
from lookahead_reasoning.eval.graders import grade
from lookahead_reasoning.eval.sandbox import run_python


def test_plain_code_passes_and_a_failing_assert_fails():
    assert run_python("print(sum(range(10)))").passed
    result = run_python("assert 1 == 2, 'nope'")
    assert not result.passed and result.status == "failed" and "nope" in result.output


def test_network_is_unreachable():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    accepted = []

    def accept():
        listener.settimeout(5)
        try:
            accepted.append(listener.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    code = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\ns.sendall(b'hi')\n"
    result = run_python(code, timeout_s=5)
    thread.join()
    listener.close()
    assert not result.passed
    assert accepted == []  # the connection never reached the host


def test_writing_outside_the_scratch_directory_is_refused(tmp_path):
    target = tmp_path / "escaped.txt"
    code = textwrap.dedent(f"""
        open("inside.txt", "w").write("fine")  # the scratch directory is allowed
        open({str(target)!r}, "w").write("escaped")
    """)
    result = run_python(code)
    assert not result.passed and "not allowed" in result.output
    assert not target.exists()
    removal = tmp_path / "keep.txt"
    removal.write_text("keep")
    assert not run_python(f"import os\nos.remove({str(removal)!r})").passed
    assert removal.exists()


def test_subprocesses_are_refused():
    result = run_python("import subprocess\nsubprocess.run(['true'])")
    assert not result.passed and "not allowed" in result.output


def test_an_endless_loop_is_killed():
    started = time.monotonic()
    result = run_python("while True:\n    pass\n", timeout_s=2)
    assert result.status == "timeout" and not result.passed
    assert time.monotonic() - started < 10


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
    assert grade(problem, endless).correct is False
