"""The `lookahead` command line: bad input gives one-line errors, and launch → run → stop works."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

LOOKAHEAD = [sys.executable, "-m", "lookahead_reasoning.runtime.cli"]


def lookahead(*args, timeout=120, env=None):
    return subprocess.run(
        [*LOOKAHEAD, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def one_line_error(proc, fragment):
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and fragment in lines[0], lines[0]
    assert proc.stdout == ""


def test_empty_question():
    one_line_error(lookahead("run", "  ", "--draft-url", "http://127.0.0.1:9", "--target-url", "http://127.0.0.1:9"), "question is empty")


def test_depth_below_one():
    one_line_error(lookahead("run", "q", "--depth", "0"), "depth")


def test_unreachable_url():
    one_line_error(lookahead("run", "q", "--draft-url", "http://127.0.0.1:9", "--target-url", "http://127.0.0.1:9"), "cannot reach")


def test_missing_endpoints_file(tmp_path):
    one_line_error(lookahead("run", "q", "--endpoints", str(tmp_path / "none.json")), "does not exist")


@pytest.mark.parametrize("content", ["{not json", '{"draft": {"url": "http://x"}}', '{"draft": 1, "target": 2, "judge": 3}'])
def test_malformed_endpoints_file(tmp_path, content):
    path = tmp_path / "endpoints.json"
    path.write_text(content)
    one_line_error(lookahead("run", "q", "--endpoints", str(path)), "endpoints file")


def test_model_folder_that_does_not_exist(tmp_path):
    one_line_error(lookahead("launch", "--draft", str(tmp_path / "missing"), "--target", "tiny", "--device", "cpu"), "does not exist")


def test_port_already_in_use():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        one_line_error(
            lookahead("launch", "--draft", "tiny", "--target", "tiny", "--device", "cpu", "--ports", str(port)),
            "already in use",
        )


def test_unknown_offline_model():
    one_line_error(lookahead("models", "prepare", "gpt-17"), "unknown model")


def _launch(endpoints: Path, draft: str, target: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*LOOKAHEAD, "launch", "--draft", draft, "--target", target, "--device", "cpu",
         "--endpoints", str(endpoints), "--max-total-tokens", "4096"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def _wait_for(path: Path, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "launch did not write the endpoints file in time"
        time.sleep(1)


@pytest.mark.server
def test_launch_run_json_and_stop(tmp_path):
    endpoints = tmp_path / "endpoints.json"
    launcher = _launch(endpoints, "tiny-draft", "tiny")
    try:
        _wait_for(endpoints, launcher)
        spec = json.loads(endpoints.read_text())
        assert spec["judge"]["url"] == spec["target"]["url"] != spec["draft"]["url"]

        proc = lookahead("run", "What is two and three?", "--endpoints", str(endpoints), "--json", "--baseline")
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)  # exactly one JSON object on stdout
        assert out["text"].startswith("We add two and three\n\n")
        assert out["answer"] in ("5", "6")
        assert {s["source"] for s in out["steps"]} <= {"draft", "target"}
        stats = out["stats"]
        for key in ("rounds", "draft_steps_judged", "draft_steps_accepted", "acceptance_rate", "wall_time_s"):
            assert key in stats
        for role in ("draft", "target", "judge"):
            assert {"prompt_tokens", "completion_tokens", "cached_tokens"} <= set(stats[role])
        assert out["baseline"]["answer"] == "5" and out["speedup"] > 0
        assert "round 1" in proc.stderr  # live progress goes to stderr

        # the draft server dies mid-session: the next run degrades to target steps and says so
        draft_port = int(spec["draft"]["url"].rsplit(":", 1)[1])
        draft_pid = _server_pid(draft_port)
        os.killpg(os.getpgid(draft_pid), signal.SIGKILL)
        proc = lookahead("run", "What is two and three?", "--endpoints", str(endpoints), "--json")
        if proc.returncode == 0:  # connected before noticing: degraded
            assert json.loads(proc.stdout)["stats"]["degraded"]
        else:
            one_line_error(proc, "draft server")
        assert launcher.wait(30) != 0  # the launcher notices the dead server, stops the rest and fails
        assert not endpoints.exists()
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)


@pytest.mark.server
def test_stop_command_stops_the_launcher(tmp_path):
    endpoints = tmp_path / "endpoints.json"
    launcher = _launch(endpoints, "tiny", "tiny")
    try:
        _wait_for(endpoints, launcher)
        url = json.loads(endpoints.read_text())["target"]["url"]
        port = int(url.rsplit(":", 1)[1])
        server_pid = _server_pid(port)
        proc = lookahead("stop", "--endpoints", str(endpoints))
        assert proc.returncode == 0, proc.stderr
        assert launcher.wait(60) == 0
        assert not endpoints.exists()
        time.sleep(1)
        assert not _alive(server_pid)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)


def _server_pid(port: int) -> int:
    """The pid of the SGLang server process listening on `port` (from /proc, by its command line)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"sglang.launch_server" in cmd and str(port).encode() in cmd:
            return int(entry.name)
    raise AssertionError(f"no server on port {port}")


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "zombie" not in status


@pytest.mark.parametrize("option, value", [("--alphas", "1.5"), ("--cs", "0"), ("--depths", "0"), ("--widths", "0")])
def test_invalid_bench_grid_values(option, value):
    one_line_error(lookahead("bench", "--sim", option, value), "invalid")


def test_bench_sim_json_and_report(tmp_path):
    proc = lookahead(
        "bench", "--sim", "--alphas", "0.6", "--cs", "0.25", "--depths", "1,adaptive", "--widths", "1",
        "--engines", "sync,async", "--problems", "1", "--target-ms", "2", "--no-alpha-shift",
        "--json", "--out", str(tmp_path), timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    points = json.loads(proc.stdout)["points"]
    assert len(points) == 4
    keys = {"alpha", "c", "depth", "width", "engine", "measured_speedup", "theory_speedup", "ratio",
            "overhead_ms_per_round", "prefix_hit_ratio"}
    for p in points:
        assert set(p) == keys
        assert p["measured_speedup"] > 0 and p["theory_speedup"] > 0
        assert p["ratio"] == pytest.approx(p["measured_speedup"] / p["theory_speedup"])
    assert {p["depth"] for p in points} == {1, "adaptive"}
    assert (tmp_path / "bench.json").exists() and (tmp_path / "bench.md").exists()
    assert list(tmp_path.glob("speedup_*.png"))
