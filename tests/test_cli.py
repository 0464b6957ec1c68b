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
from cli_invoke import invoke, one_line_error

LOOKAHEAD = [sys.executable, "-m", "lookahead_reasoning.cli"]


def lookahead(*args, timeout=120, env=None):
    """The CLI in a subprocess: for what needs its own process (a launcher, a run against it)."""
    return subprocess.run(
        [*LOOKAHEAD, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def test_empty_question(capsys):
    one_line_error(invoke(capsys, "run", "  ", "--draft-url", "http://127.0.0.1:9", "--target-url", "http://127.0.0.1:9"), "question is empty")


def test_depth_below_one(capsys):
    one_line_error(invoke(capsys, "run", "q", "--depth", "0"), "depth")


def test_unreachable_url(capsys):
    one_line_error(invoke(capsys, "run", "q", "--draft-url", "http://127.0.0.1:9", "--target-url", "http://127.0.0.1:9"), "cannot reach")


def test_missing_endpoints_file(capsys, tmp_path):
    one_line_error(invoke(capsys, "run", "q", "--endpoints", str(tmp_path / "none.json")), "does not exist")


@pytest.mark.parametrize("content", ["{not json", '{"draft": {"url": "http://x"}}', '{"draft": 1, "target": 2, "judge": 3}'])
def test_malformed_endpoints_file(capsys, tmp_path, content):
    path = tmp_path / "endpoints.json"
    path.write_text(content)
    one_line_error(invoke(capsys, "run", "q", "--endpoints", str(path)), "endpoints file")


def test_model_folder_that_does_not_exist(capsys, tmp_path):
    one_line_error(invoke(capsys, "launch", "--draft", str(tmp_path / "missing"), "--target", "tiny", "--device", "cpu"), "does not exist")


def test_port_already_in_use(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        one_line_error(
            invoke(capsys, "launch", "--draft", "tiny", "--target", "tiny", "--device", "cpu", "--ports", str(port)),
            "already in use",
        )


def test_unknown_offline_model(capsys):
    one_line_error(invoke(capsys, "weights", "prepare", "gpt-17"), "unknown model")


def _launch(endpoints: Path, draft: str, target: str, log: Path, *extra: str) -> subprocess.Popen:
    with open(log, "w") as stderr:
        return subprocess.Popen(
            [*LOOKAHEAD, "launch", "--draft", draft, "--target", target, "--device", "cpu",
             "--endpoints", str(endpoints), "--max-total-tokens", "4096", *extra],
            stdout=subprocess.DEVNULL, stderr=stderr, text=True, start_new_session=True,
        )


def _wait_for(done, proc, log: Path, what: str, timeout=300):
    deadline = time.monotonic() + timeout
    while not done():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"{what} did not happen in time:\n{log.read_text()}"
        time.sleep(0.5)


@pytest.mark.server
def test_launch_run_json_supervise_and_die_with_the_launcher(tmp_path):
    from lookahead_reasoning.runtime.config import LookaheadConfig
    from lookahead_reasoning.runtime.servers.endpoints import load_endpoints
    from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

    endpoints, log = tmp_path / "endpoints.json", tmp_path / "launch.log"
    # the first restart waits 10 s, then the server takes far longer to load: the run below finishes before
    launcher = _launch(endpoints, "tiny-draft", "tiny", log, "--restart-backoff", "10")
    servers = []
    try:
        _wait_for(endpoints.exists, launcher, log, "writing the endpoints file")
        spec = json.loads(endpoints.read_text())
        assert spec["judge"]["url"] == spec["target"]["url"] != spec["draft"]["url"]
        servers = [os.getpgid(_server_pid(int(spec[role]["url"].rsplit(":", 1)[1]))) for role in ("draft", "target")]

        proc = lookahead("run", "What is two and three?", "--endpoints", str(endpoints), "--depth", "2", "--json",
                         "--baseline")
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)  # exactly one JSON object on stdout
        assert out["text"] == "We add two and three\n\nHence \\boxed{5}"
        assert out["answer"] == "5"
        assert [s["source"] for s in out["steps"]] == ["draft", "target"]
        stats = out["stats"]
        assert stats["draft_steps_accepted"] == 1 and stats["degraded"] == []
        for role in ("draft", "target", "judge"):
            assert {"prompt_tokens", "completion_tokens", "cached_tokens"} <= set(stats[role])
        assert out["baseline"]["answer"] == "5" and out["speedup"] > 0
        assert "round 1" in proc.stderr  # live progress goes to stderr

        # the draft server dies: the launcher keeps the target and restarts the draft; meanwhile runs
        # degrade to target steps, and after the restart they draft again
        reasoner = LookaheadReasoner(load_endpoints(endpoints), LookaheadConfig(depth=2, max_tokens=64))
        os.killpg(servers[0], signal.SIGKILL)
        _wait_for(lambda: "restarting in 10 s" in log.read_text(), launcher, log, "noticing the dead draft", 30)
        restarting = lambda: json.loads(endpoints.read_text())["restarting"]  # noqa: E731
        _wait_for(lambda: restarting() == ["draft"], launcher, log, "the endpoints file naming the restart", 10)
        degraded = reasoner.run("What is two and three?")
        assert len(degraded.stats.degraded) == 1 and degraded.stats.degraded[0].startswith("draft failed")
        assert degraded.text == out["text"] and {s.source for s in degraded.steps} == {"target"}
        _wait_for(lambda: "draft server is ready again" in log.read_text(), launcher, log, "restarting the draft")
        _wait_for(lambda: restarting() == [], launcher, log, "the endpoints file clearing the restart", 10)
        again = reasoner.run("What is two and three?")
        assert again.stats.degraded == [] and again.stats.draft_steps_accepted == 1
        servers.append(os.getpgid(_server_pid(int(spec["draft"]["url"].rsplit(":", 1)[1]))))

        # a stalled draft (SIGSTOP): the run waits no longer than the draft's timeout, then goes on with target steps
        stalled = LookaheadReasoner(load_endpoints(endpoints), LookaheadConfig(depth=2, max_tokens=64, draft_timeout_s=3))
        os.killpg(servers[-1], signal.SIGSTOP)
        try:
            started = time.monotonic()
            slow = stalled.run("What is two and three?")
            assert time.monotonic() - started < 30
        finally:
            os.killpg(servers[-1], signal.SIGCONT)
        assert slow.text == out["text"] and slow.stats.degraded[0].startswith("draft failed")

        # SIGKILL leaves the launcher no chance to clean up: its servers die with it all the same
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(10)
        deadline = time.monotonic() + 30
        while _group_members(servers) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _group_members(servers) == []
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        for pgid in servers:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.server
def test_stop_command_stops_the_launcher(tmp_path):
    endpoints, log = tmp_path / "endpoints.json", tmp_path / "launch.log"
    launcher = _launch(endpoints, "tiny", "tiny", log)
    try:
        _wait_for(endpoints.exists, launcher, log, "writing the endpoints file")
        spec = json.loads(endpoints.read_text())
        port = int(spec["target"]["url"].rsplit(":", 1)[1])
        server_pid = _server_pid(port)

        stale = tmp_path / "stale.json"  # the same PID with another start time: not our launcher
        stale.write_text(json.dumps({**spec, "launcher_started": spec["launcher_started"] + 1}))
        one_line_error(lookahead("stop", "--endpoints", str(stale)), "not the launcher")
        assert launcher.poll() is None

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


def _group_members(pgids: list[int]) -> list[int]:
    """Live (not zombie) processes in any of these process groups."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) in pgids:
                members.append(int(entry.name))
    return members


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "zombie" not in status


@pytest.mark.parametrize("option, value", [("--alphas", "1.5"), ("--cs", "0"), ("--depths", "0"), ("--widths", "0")])
def test_invalid_bench_grid_values(capsys, option, value):
    one_line_error(invoke(capsys, "bench", "sim", option, value), "invalid")


def test_bench_sim_json_and_report(capsys, tmp_path):
    proc = invoke(capsys, 
        "bench", "sim", "--alphas", "0.6", "--cs", "0.25", "--depths", "1,adaptive", "--widths", "1,2",
        "--engines", "sync,async", "--problems", "1", "--target-ms", "2", "--no-alpha-shift",
        "--json", "--out", str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    points = json.loads(proc.stdout)["points"]
    assert len(points) == 8
    keys = {"alpha", "c", "depth", "width", "engine", "measured_speedup", "theory_speedup", "ratio",
            "finite_theory_speedup", "finite_ratio", "pattern_theory_speedup", "pattern_ratio",
            "overhead_ms_per_round", "prefix_hit_ratio"}
    for p in points:
        assert set(p) == keys
        assert p["measured_speedup"] > 0 and p["theory_speedup"] > 0
        assert p["ratio"] == pytest.approx(p["measured_speedup"] / p["theory_speedup"])
        assert p["finite_ratio"] == pytest.approx(p["measured_speedup"] / p["finite_theory_speedup"])
        assert p["finite_theory_speedup"] <= p["theory_speedup"] + 1e-9  # 12-step problems gain no more
        if p["depth"] == 1:  # the theory on the verdicts the run drew
            assert p["pattern_ratio"] == pytest.approx(p["measured_speedup"] / p["pattern_theory_speedup"])
        else:  # adaptive rounds are not one fixed γ's
            assert p["pattern_theory_speedup"] is None and p["pattern_ratio"] is None
    assert {p["depth"] for p in points} == {1, "adaptive"}
    assert (tmp_path / "bench.json").exists() and (tmp_path / "bench.md").exists()
    assert len((tmp_path / "bench.jsonl").read_text().splitlines()) == 8  # written point by point
    assert list(tmp_path.glob("speedup_*.png"))


@pytest.mark.parametrize("option, value", [("--slopes", "-1"), ("--concurrencies", "0"), ("--depths", "ar,x"),
                                           ("--engines", "fast"), ("--slopes", "a,b"), ("--repeats", "0"),
                                           ("--requests", "0")])
def test_invalid_bench_load_grids_get_one_line(capsys, option, value):
    proc = invoke(capsys, "bench", "load", option, value)
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error:")


def test_bench_load_json_table_and_plot(capsys, tmp_path):
    proc = invoke(capsys,
        "bench", "load", "--slopes", "0,1", "--concurrencies", "1,2", "--depths", "ar,2,adaptive",
        "--engines", "sync", "--target-ms", "2", "--requests", "6", "--json", "--out", str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    points = json.loads(proc.stdout)["points"]
    assert len(points) == 2 * 2 * 3
    keys = {"slope", "concurrency", "engine", "depth", "width", "tokens_per_s", "p50_s", "p99_s", "speedup_vs_ar",
            "throughput_vs_ar"}
    for p in points:
        assert set(p) == keys and p["tokens_per_s"] > 0 and p["p99_s"] >= p["p50_s"] > 0
        for ratio in ("speedup_vs_ar", "throughput_vs_ar"):
            assert p[ratio] == 1.0 if p["depth"] == "ar" else p[ratio] > 0
    assert {p["depth"] for p in points} == {"ar", 2, "adaptive"}
    assert len((tmp_path / "load.jsonl").read_text().splitlines()) == len(points)  # written point by point
    assert (tmp_path / "load.md").read_text().startswith("| slope | concurrency |")
    assert (tmp_path / "load.png").stat().st_size > 0 and json.loads((tmp_path / "load.json").read_text())["points"]


def _grid_without_servers(monkeypatch, run_point, questions):
    """`run_load_grid` with `run_point` and `questions` standing in for the simulated servers' runs."""
    from lookahead_reasoning.eval import load_bench

    class FakeCluster:
        def __init__(self, latency): ...
        def __enter__(self): return self
        def __exit__(self, *exc): ...
        def configure(self, *args, **kwargs): ...

    monkeypatch.setattr(load_bench, "_run_point", run_point)
    monkeypatch.setattr(load_bench, "SimCluster", FakeCluster)
    monkeypatch.setattr(load_bench, "questions", questions)


def test_bench_load_repeats_report_medians_of_side_by_side_runs(monkeypatch):
    """Each repeat runs AR first, then the methods; a point's figures are medians over the repeats, its
    speedup (p50) and throughput ratio the medians of each repeat's ratio to that repeat's AR (not the
    ratios of the medians)."""
    from lookahead_reasoning.eval import load_bench

    p50s = {"ar": iter([1.0, 1.0, 10.0]), 2: iter([0.5, 2.0, 2.0])}  # per-repeat speedups of γ = 2: 2, 0.5, 5
    calls = []

    def fake_run_point(cluster, depth, engine, problems, concurrency, latency):
        calls.append(depth)
        p50 = next(p50s[depth])
        # γ = 2's wave ends at twice its median request: its throughput ratios are half its p50 ratios
        return load_bench._Measured(wall=p50 * (2 if depth == 2 else 1), latencies=[p50], tokens=100, judged=0,
                                    accepted=0)

    _grid_without_servers(monkeypatch, fake_run_point, lambda latency: ["q"])
    grid = load_bench.LoadGrid(slopes=[0.0], concurrency=[1], depths=["ar", 2], engines=["sync"], repeats=3)
    seen = []
    points = load_bench.run_load_grid(grid, load_bench.LatencyModel(), progress=seen.append)
    assert calls == ["ar", 2] * 3  # side by side, AR first in every repeat
    ar, drafted = points
    assert (ar.p50_s, ar.speedup_vs_ar, ar.tokens_per_s) == (1.0, 1.0, 100.0)
    assert drafted.p50_s == 2.0 and drafted.speedup_vs_ar == 2.0  # the ratio of the medians would be 0.5
    assert ar.throughput_vs_ar == 1.0 and drafted.throughput_vs_ar == 1.0  # per repeat 1, 0.25, 2.5
    assert seen == points


def test_bench_load_methods_take_turns_after_ar(monkeypatch):
    """Every repeat starts with AR; the methods after it start at evenly spread places of their list, so
    that none is always measured last; the points come out in the methods' order."""
    from lookahead_reasoning.eval import load_bench

    calls = []

    def fake_run_point(cluster, depth, engine, problems, concurrency, latency):
        calls.append(depth)
        return load_bench._Measured(wall=1.0, latencies=[1.0], tokens=1, judged=0, accepted=0)

    _grid_without_servers(monkeypatch, fake_run_point, lambda latency: ["q"])
    grid = load_bench.LoadGrid(slopes=[0.0], concurrency=[1], depths=["ar", 1, 2, 4], engines=["sync"], repeats=3)
    seen = []
    points = load_bench.run_load_grid(grid, load_bench.LatencyModel(), progress=seen.append)
    assert calls == ["ar", 1, 2, 4, "ar", 2, 4, 1, "ar", 4, 1, 2]
    assert [p.depth for p in seen] == ["ar", 4, 1, 2]  # as each method's last run ended
    assert [p.depth for p in points] == ["ar", 1, 2, 4]


@pytest.mark.parametrize("concurrency, floor, expected", [
    (1, {}, 32), (4, {}, 32), (16, {}, 48),  # the default floor
    (64, {"min_requests": 16}, 192), (1, {"min_requests": 16}, 16), (16, {"min_requests": 60}, 60)])
def test_bench_load_points_run_three_requests_per_thread(monkeypatch, concurrency, floor, expected):
    """A point runs at least three requests per concurrent thread, so that most of it runs at its concurrency
    (one request per thread would be one burst that drains); `min_requests` still sets a floor."""
    from lookahead_reasoning.eval import load_bench

    asked = []

    def fake_questions(latency):
        asked.append(latency.problems)
        return [f"q{i}" for i in range(latency.problems)]

    def fake_run_point(cluster, depth, engine, problems, concurrency, latency):
        return load_bench._Measured(wall=1.0, latencies=[1.0] * len(problems), tokens=len(problems), judged=0,
                                    accepted=0)

    _grid_without_servers(monkeypatch, fake_run_point, fake_questions)
    grid = load_bench.LoadGrid(slopes=[0.0], concurrency=[concurrency], depths=["ar"], engines=["sync"], **floor)
    load_bench.run_load_grid(grid, load_bench.LatencyModel())
    assert asked == [expected]


@pytest.mark.parametrize("requests, warmup_waves", [(16, 3), (64, 1)])
def test_bench_load_warms_the_adaptive_policy_up_before_measuring(monkeypatch, requests, warmup_waves):
    """Only the adaptive policy learns: it serves `WARMUP_WAVES` unmeasured waves of other requests first, fewer
    where they reach `WARMUP_REQUESTS`; a fixed γ and AR are measured at once."""
    from types import SimpleNamespace

    from lookahead_reasoning.eval import load_bench
    from lookahead_reasoning.runtime import reasoner

    runs, asked = [], []

    class CountingReasoner:
        def __init__(self, endpoints, config):
            self.adaptive = config.adaptive_depth

        def run(self, question):
            runs.append(self.adaptive)
            asked.append(question)
            stats = SimpleNamespace(finish="eos", degraded=[], output_tokens=10, draft_steps_judged=2,
                                    draft_steps_accepted=1)
            return SimpleNamespace(stats=stats)

    monkeypatch.setattr(reasoner, "LookaheadReasoner", CountingReasoner)
    cluster = SimpleNamespace(endpoints=lambda: None)
    problems = [f"q{i}" for i in range(requests)]
    latency = load_bench.LatencyModel()
    measured = load_bench._run_point(cluster, "adaptive", "sync", problems, 4, latency)
    assert runs == [True] * requests * (warmup_waves + 1) and len(measured.latencies) == requests
    # it learns on other problems (the simulated judge's verdicts are fixed per problem and step), then
    # the point's problems are measured
    assert len(set(asked)) == len(asked) and sorted(asked[-requests:]) == sorted(problems)
    runs.clear()
    load_bench._run_point(cluster, 2, "sync", problems, 4, latency)
    assert runs == [False] * requests


def test_launch_dry_run_prints_the_exact_commands_and_starts_nothing(capsys):
    out = invoke(capsys, "launch", "--draft", "Qwen/Qwen2.5-0.5B-Instruct", "--target", "Qwen/Qwen2.5-32B-Instruct",
                 "--device", "cuda", "--ports", "30000,30001", "--target-server-args",
                 "--tp 4 --speculative-algorithm NGRAM", "--dry-run")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# target+judge server (Qwen/Qwen2.5-32B-Instruct)"
    assert lines[1].endswith("-m sglang.launch_server --model-path Qwen/Qwen2.5-32B-Instruct --host 127.0.0.1 "
                             "--port 30000 --grammar-backend outlines --tp 4 --speculative-algorithm NGRAM")
    assert lines[2] == "# draft server (Qwen/Qwen2.5-0.5B-Instruct)"
    assert lines[3].endswith("--model-path Qwen/Qwen2.5-0.5B-Instruct --host 127.0.0.1 --port 30001")
    cpu = invoke(capsys, "launch", "--draft", "tiny-draft", "--target", "tiny", "--device", "cpu", "--dry-run")
    assert "SGLANG_USE_CPU_ENGINE=1" in cpu.stdout and "--device cpu --dtype " in cpu.stdout  # which: test_cpu_dtype.py


@pytest.mark.server
def test_ctrl_c_during_start_up_stops_at_once(tmp_path):
    endpoints, log = tmp_path / "endpoints.json", tmp_path / "launch.log"
    launcher = _launch(endpoints, "tiny-draft", "tiny", log)
    try:
        _wait_for(lambda: "starting draft server" in log.read_text(), launcher, log, "starting the servers", 120)
        pgids = [os.getpgid(pid) for pid in _children(launcher.pid)]
        assert pgids  # the servers are starting, not yet ready
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(30) == 130
        assert not endpoints.exists()
        deadline = time.monotonic() + 30
        while _group_members(pgids) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _group_members(pgids) == []
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)


def _children(parent: int) -> list[int]:
    """Processes whose parent is `parent`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def test_demo_and_run_take_one_threshold_default():
    """Neither sets a number of its own: a saved calibration, else the verifier's default (LookaheadConfig)."""
    import inspect

    from lookahead_reasoning.cli.reasoning import demo, run

    for command in (demo, run):
        assert inspect.signature(command).parameters["threshold"].default is None
