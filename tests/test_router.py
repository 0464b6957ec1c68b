"""Replicas behind SGLang's router (sglang-router), on the CPU with the scripted tiny models.

One `lookahead launch --target-replicas 2` for the module: two tiny target replicas (the judge
shares them) behind a cache_aware router, and one tiny-draft server. Every program request goes
through the router: fork branches, the judge's regex answer with logprobs, the scorer, `select`.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from cli_invoke import invoke, one_line_error

pytestmark = [pytest.mark.server, pytest.mark.router]

LOOKAHEAD = [sys.executable, "-m", "lookahead_reasoning.cli"]
REPO = Path(__file__).resolve().parents[1]
QUESTION = "What is two and three?"
TEXT = "We add two and three\n\nHence \\boxed{5}"  # what tiny writes, and so what LR with the tiny judge writes


def long_question(topic: str) -> str:
    """A question whose prompt (~650 tokens) outweighs the steps: where its prefix is cached matters."""
    return QUESTION + " " + " ".join(f"Consider {topic} fact number {i}: numbers add up the usual way." for i in range(30))


@dataclass
class Launch:
    process: subprocess.Popen
    endpoints_path: Path
    log: Path

    @property
    def endpoints(self):
        from lookahead_reasoning.runtime.servers.endpoints import load_endpoints

        return load_endpoints(self.endpoints_path)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _wait_for(done, launch: Launch, what: str, timeout: float = 660) -> None:
    """Until `done()`; the default outlasts the launcher's own 600 s start-up limit, whose error names what hung."""
    deadline = time.monotonic() + timeout
    while not done():
        assert launch.process.poll() is None, f"the launcher exited:\n{launch.log_text()}"
        assert time.monotonic() < deadline, f"{what} did not happen in time:\n{launch.log_text()}"
        time.sleep(0.5)


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    """Live processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and fields[0] != "Z" and int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _group_members(pgids: list[int]) -> list[int]:
    """Live (not zombie) processes in any of these process groups."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and fields[0] != "Z" and int(fields[2]) in pgids:
                members.append(int(entry.name))
    return members


def _server_of(launch: Launch, url: str) -> int:
    """The launcher's child that serves `url` (an SGLang server, by its command line)."""
    port = url.rsplit(":", 1)[1]
    for pid in _children(launch.process.pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"sglang.launch_server" in cmd and port.encode() in cmd:
            return pid
    raise AssertionError(f"no server of the launcher serves {url}")


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("router")
    endpoints, log = folder / "endpoints.json", folder / "launch.log"
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            [*LOOKAHEAD, "launch", "--draft", "tiny-draft", "--target", "tiny", "--device", "cpu",
             "--target-replicas", "2", "--endpoints", str(endpoints), "--max-total-tokens", "8192"],
            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
        )
    launch = Launch(process, endpoints, log)
    try:
        _wait_for(endpoints.exists, launch, "writing the endpoints file")
        yield launch
    finally:
        groups = []
        for pid in _children(process.pid):
            try:
                groups.append(os.getpgid(pid))
            except ProcessLookupError:
                pass
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # the launcher stops its routers and servers
            try:
                process.wait(90)
            except subprocess.TimeoutExpired:
                process.kill()
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _healthy_workers(router: str) -> int | None:
    try:
        return requests.get(router + "/readiness", timeout=10).json().get("healthy_workers")
    except (requests.RequestException, ValueError):
        return None


def _reasoner(endpoints, **config):
    from lookahead_reasoning.runtime.config import LookaheadConfig
    from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

    # the LLM judge alone (no numbers gate), so that tiny-draft's second step reaches the judge through the router
    return LookaheadReasoner(endpoints, LookaheadConfig(**{"depth": 3, "max_tokens": 64, "verifier": "llm-judge",
                                                           **config}))


def _direct(endpoints, worker: str):
    """The same endpoints with the target and judge on one replica, not through the router."""
    direct = endpoints.model_copy(deep=True)
    direct.target.url = direct.judge.url = worker
    return direct


def test_launch_puts_the_replicas_behind_one_router(launched):
    spec = launched.endpoints
    router, workers = spec.target.url, spec.target.workers
    assert spec.judge.url == router and len(workers) == 2 and router not in workers
    assert spec.draft.workers == [] and spec.draft.url not in (router, *workers)
    assert requests.get(router + "/get_model_info", timeout=10).json()["model_path"].endswith("tiny")
    _wait_for(lambda: _healthy_workers(router) == 2, launched, "the router seeing both replicas healthy", 60)
    assert {w["url"] for w in requests.get(router + "/workers", timeout=10).json()["workers"]} == set(workers)
    assert len(_children(launched.process.pid)) == 4  # two replicas, the draft server, the router
    log = launched.log_text()
    assert "target+judge replica 2 of 2 ready" in log and "target+judge router ready" in log


def test_lr_through_the_router_writes_what_one_server_writes(launched):
    spec = launched.endpoints
    routed = _reasoner(spec).run(QUESTION)
    alone = _reasoner(_direct(spec, spec.target.workers[0])).run(QUESTION)
    assert routed.text == alone.text == TEXT
    assert [(s.source, s.text) for s in routed.steps] == [("draft", "We add two and three\n\n"), ("target", "Hence \\boxed{5}")]
    assert routed.stats.degraded == [] and routed.stats.judge.requests == 1  # the judge answered through the router


def test_every_program_request_passes_the_router(launched):
    from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint

    from lookahead_reasoning.programs import LookaheadEndpoint, judge_pairs
    from lookahead_reasoning.programs.roles import score_answer_on, score_steps_on

    spec = launched.endpoints
    router = LookaheadEndpoint(spec.target.url, chat_template="chatml")
    server = LookaheadEndpoint(spec.target.workers[1], chat_template="chatml")
    pairs = [("We add two and three", "We add two and three"), ("Hence \\boxed{5}", "Thus \\boxed{6}")]
    routed, direct = judge_pairs(router, pairs), judge_pairs(server, pairs)
    assert [a.answer for a in routed] == [a.answer for a in direct] and all(a.answer in ("yes", "no") for a in routed)
    assert [a.p_yes for a in routed] == pytest.approx([a.p_yes for a in direct])  # the logprobs came through
    steps = ["We add two and three", "Thus \\boxed{6}"]
    assert [s.text for s in score_steps_on(router, QUESTION, steps)] == [s.text for s in score_steps_on(server, QUESTION, steps)]
    assert score_answer_on(router, QUESTION, "Hence \\boxed{5}", "5").text == score_answer_on(server, QUESTION, "Hence \\boxed{5}", "5").text

    # `select` (examples/agent.py): upstream's batched request is refused by the router; ours is not
    agent = importlib.util.spec_from_file_location("agent_example", REPO / "examples" / "agent.py")
    module = importlib.util.module_from_spec(agent)
    agent.loader.exec_module(module)
    results = []
    for endpoints in (spec, _direct(spec, spec.target.workers[1])):
        reasoner = _reasoner(endpoints, depth=2)
        state = module.solve_with_tools.run(question=QUESTION, reasoner=reasoner, backend=reasoner.connection.backends["target"])
        assert state.error() is None, state.error()
        results.append((state["reasoning"], state["tool"], state["verdict"]))
    assert results[0] == results[1] and results[0][0] == TEXT
    assert results[0][1] in module.TOOLS and results[0][2] in ("yes", "no")
    upstream = RuntimeEndpoint(spec.target.url)
    upstream.chat_template = router.chat_template
    state = module.solve_with_tools.run(question=QUESTION, reasoner=_reasoner(spec, depth=2), backend=upstream)
    assert state.error() is not None and "expected a string" in str(state.error())  # HTTP 422: `text` must be one string


def test_cache_aware_routing_keeps_the_branches_on_the_cached_prefix(launched, capsys, tmp_path):
    from lookahead_reasoning.runtime.servers.endpoints import save_endpoints
    from lookahead_reasoning.runtime.servers.router import running_router

    spec = launched.endpoints
    requests.post(spec.target.url + "/flush_cache", timeout=30).raise_for_status()  # flushes every replica
    cache_aware = _reasoner(spec).run(long_question("cache-aware"))
    with running_router(spec.target.workers, "round_robin", log_path=tmp_path / "round-robin.log") as url:
        requests.post(url + "/flush_cache", timeout=30).raise_for_status()
        round_robin = _reasoner(_direct(spec, url)).run(long_question("round-robin"))
    assert cache_aware.text == round_robin.text == TEXT
    ca, rr = cache_aware.stats.target_branch_cache_ratio, round_robin.stats.target_branch_cache_ratio
    with capsys.disabled():
        print(f"\ntarget-branch cache ratio, 2 replicas, first run after a flush: cache_aware {ca:.3f}, round_robin {rr:.3f}")
    assert ca >= 0.8

    # the round-robin router is stopped now: a run against it is a one-line error naming the role
    stopped = tmp_path / "stopped-router.json"
    save_endpoints(_direct(spec, url), stopped)
    outcome = invoke(capsys, "run", QUESTION, "--endpoints", str(stopped))
    one_line_error(outcome, "cannot reach")
    assert "target" in outcome.stderr and url in outcome.stderr


def test_launch_options_that_cannot_work_are_one_line_errors(capsys):
    base = ["launch", "--draft", "tiny-draft", "--target", "tiny", "--device", "cpu"]
    one_line_error(invoke(capsys, *base, "--target-replicas", "0"), "--target-replicas must be at least 1")
    one_line_error(invoke(capsys, *base, "--draft-replicas", "-1"), "--draft-replicas must be at least 1")
    one_line_error(invoke(capsys, *base, "--router-policy", "fastest"), "router policy")
    one_line_error(invoke(capsys, *base, "--target-router-url", "router:30000"), "--target-router-url must be an http(s) URL")
    one_line_error(invoke(capsys, *base, "--target-router-url", "http://127.0.0.1:9"), "cannot reach the target+judge router")
    one_line_error(invoke(capsys, *base, "--target-replicas", "2", "--target-router-url", "http://127.0.0.1:9"), "exclude each other")
    one_line_error(invoke(capsys, "launch", "--draft", "tiny-draft", "--device", "cpu"), "--target-router-url")


def test_dry_run_prints_the_worker_and_router_commands(capsys):
    out = invoke(capsys, "launch", "--draft", "Qwen/Qwen2.5-0.5B-Instruct", "--target", "Qwen/Qwen2.5-32B-Instruct",
                 "--device", "cuda", "--target-replicas", "2", "--target-server-args", "--tp 4",
                 "--ports", "30000,30001,30002,30003", "--dry-run")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# target+judge replica 1 of 2 (Qwen/Qwen2.5-32B-Instruct)"
    assert lines[1].endswith("-m sglang.launch_server --model-path Qwen/Qwen2.5-32B-Instruct --host 127.0.0.1 "
                             "--port 30000 --grammar-backend outlines --tp 4 --base-gpu-id 0")
    assert lines[3].endswith("--port 30001 --grammar-backend outlines --tp 4 --base-gpu-id 4")
    assert lines[4] == "# target+judge router (cache_aware over 2 replicas)"
    assert ("-m sglang_router.launch_router --worker-urls http://127.0.0.1:30000 http://127.0.0.1:30001 "
            "--policy cache_aware --host 127.0.0.1 --port 30002 --prometheus-host 127.0.0.1 --prometheus-port ") in lines[5]
    assert lines[6] == "# draft server (Qwen/Qwen2.5-0.5B-Instruct)"
    assert lines[7].endswith("--model-path Qwen/Qwen2.5-0.5B-Instruct --host 127.0.0.1 --port 30003")
    given = invoke(capsys, "launch", "--draft", "tiny-draft", "--device", "cpu", "--target-router-url",
                   "http://10.0.0.5:30000", "--dry-run")
    assert given.stdout.splitlines()[0] == "# target+judge: the router at http://10.0.0.5:30000 (started elsewhere; nothing to start)"


def test_a_dead_replica_leaves_runs_to_the_other_and_all_die_with_the_launcher(launched):
    spec = launched.endpoints
    question = long_question("fault")
    reasoner = _reasoner(spec)
    assert reasoner.run(question).text == TEXT
    # the replica that holds the question's prefix (cache_aware sent the run there) is the one to kill
    prompt = reasoner.connection.models.prompt(question)
    cached = {w: requests.post(w + "/generate", json={"text": prompt, "sampling_params": {"max_new_tokens": 0}},
                               timeout=60).json()["meta_info"]["cached_tokens"] for w in spec.target.workers}
    holder = max(cached, key=cached.get)
    os.killpg(os.getpgid(_server_of(launched, holder)), signal.SIGKILL)
    for _ in range(3):
        result = reasoner.run(question)
        assert result.text == TEXT and result.stats.degraded == []
    number = spec.target.workers.index(holder) + 1
    _wait_for(lambda: f"target+judge replica {number} of 2 died" in launched.log_text(), launched, "noticing the dead replica", 30)
    _wait_for(lambda: f"restarting the target+judge replica {number} of 2" in launched.log_text(), launched, "its restart", 30)
    assert json.loads(launched.endpoints_path.read_text())["restarting"] == []  # the target is still served

    # SIGKILL leaves the launcher no chance to clean up: its servers and its router die with it all the same
    groups = [os.getpgid(pid) for pid in _children(launched.process.pid)]
    assert len(groups) == 4
    launched.process.kill()
    launched.process.wait(10)
    deadline = time.monotonic() + 30
    while _group_members(groups) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _group_members(groups) == []
