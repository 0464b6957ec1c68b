"""`lookahead eval` and `lookahead sweep` over simulated SGLang servers: records, resuming, Ctrl-C, reports."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from cli_invoke import invoke

from lookahead_reasoning.eval.datasets import load_problems
from lookahead_reasoning.eval.records import EvalRecord, ResultStore
from lookahead_reasoning.eval.report import summarize, write_report
from lookahead_reasoning.eval.runner import parse_methods, run_eval
from lookahead_reasoning.eval.simserver import SimConfig
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.errors import LookaheadError

CONFIG = LookaheadConfig(depth=2, max_tokens=400, max_step_tokens=20, verifier="llm-judge", verifier_threshold=0.5,
                         request_timeout_s=10)


@pytest.fixture(scope="module")
def sims(sim_servers):
    with sim_servers(
        SimConfig(role="draft", decode_ms=1.0, steps=4, step_tokens=4),
        SimConfig(role="target", decode_ms=8.0, steps=4, step_tokens=4),
        SimConfig(role="judge", decode_ms=2.0, alpha=0.7, seed=3),
    ) as servers:
        yield servers


@pytest.fixture
def problems(tmp_path):
    data = tmp_path / "gsm.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(3)))
    return load_problems("gsm8k", data)


# A shell that starts a job in the background (as CI harnesses may) makes it ignore SIGINT, and
# Python keeps an ignored SIGINT ignored; so the CLI under test gets the usual handler back first.
INTERRUPTIBLE_CLI = [
    sys.executable, "-c",
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from lookahead_reasoning.cli.app import main; sys.argv[0] = 'lookahead'; main()",
]


def url_options(sims) -> list[str]:
    return ["--draft-url", sims.draft.url, "--target-url", sims.target.url, "--judge-url", sims.judge.url,
            "--chat-template", "chatml"]


def test_every_method_writes_a_line_and_the_report_compares_them(sims, problems, tmp_path):
    methods = parse_methods("ar,lr,lr-async,draft", CONFIG)
    seen = []
    records = run_eval(problems, methods, sims.endpoints(), tmp_path / "out", {"dataset": "gsm8k"}, samples=1,
                       progress=lambda r, n, total: seen.append((r, n, total)))
    assert len(records) == 12
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 12 and len(seen) == 13 and seen[0] == (None, 0, 12)
    by_key = {(r.problem_id, r.method): r for r in records}
    lr, ar = by_key[("p0", "lr")], by_key[("p0", "ar")]
    assert lr.draft_steps_judged >= 1 and lr.rounds >= 1 and ar.rounds == 0
    assert lr.correct is False and lr.reference == "0"  # simulated text has no boxed answer
    summaries = write_report(records, [m.name for m in methods], tmp_path / "out", "test", [])
    by_method = {s.method: s for s in summaries}
    assert by_method["ar"].speedup_median == pytest.approx(1.0)
    assert by_method["lr"].paired == 3 and by_method["lr"].acceptance_rate is not None
    assert by_method["draft"].acceptance_rate is None and by_method["draft"].accuracy == 0.0
    for name in ("report.json", "report.md", "report.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert "| lr-async |" in (tmp_path / "out" / "report.md").read_text()


def test_a_rerun_resumes_and_a_torn_line_is_redone(sims, problems, tmp_path):
    methods = parse_methods("ar,lr", CONFIG)
    out = tmp_path / "out"
    run_eval(problems[:2], methods, sims.endpoints(), out, {"dataset": "gsm8k"})
    results = out / "results.jsonl"
    assert len(results.read_text().splitlines()) == 4
    seen = []
    run_eval(problems, methods, sims.endpoints(), out, {"dataset": "gsm8k"}, progress=lambda r, n, t: seen.append((r, n)))
    assert seen[0] == (None, 4) and len(seen) == 3  # only problem p2's two methods ran
    raw = results.read_bytes()
    results.write_bytes(raw[: len(raw) - 40])  # a crash in the middle of the last line
    assert len(ResultStore(results).load()) == 5
    records = run_eval(problems, methods, sims.endpoints(), out, {"dataset": "gsm8k"})
    keys = [EvalRecord.model_validate_json(line).key for line in results.read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 6 and len(records) == 6


def test_other_settings_do_not_mix_into_a_run(sims, problems, tmp_path):
    out = tmp_path / "out"
    run_eval(problems[:1], parse_methods("ar", CONFIG), sims.endpoints(), out, {"dataset": "gsm8k", "config": 1})
    with pytest.raises(LookaheadError, match="other settings"):
        run_eval(problems[:1], parse_methods("ar", CONFIG), sims.endpoints(), out, {"dataset": "gsm8k", "config": 2})
    (out / "results.jsonl").write_text('{"not": "a record"}\n')
    with pytest.raises(LookaheadError, match=r"results.jsonl:1: not an eval result"):
        run_eval(problems[:1], parse_methods("ar", CONFIG), sims.endpoints(), out, {"dataset": "gsm8k", "config": 1})


def test_samples_and_methods_are_checked(problems):
    with pytest.raises(LookaheadError, match="unknown method"):
        parse_methods("ar,beam", CONFIG)
    sampled = LookaheadConfig(seed=5, draft_sampling={"temperature": 0.7})
    from lookahead_reasoning.eval.runner import sample_config

    assert sample_config(sampled, 2).seed == 7 and sample_config(CONFIG, 2).seed is None


def test_summary_pairs_speedups_by_problem_and_sample():
    def record(pid, method, wall, correct, accepted=0, judged=0):
        return EvalRecord(problem_id=pid, method=method, sample=0, correct=correct, wall_s=wall, prompt_tokens=10,
                          output_tokens=100, finish="eos", draft_steps_accepted=accepted, draft_steps_judged=judged,
                          text="")

    records = [record("a", "ar", 10, True), record("b", "ar", 20, False),
               record("a", "lr", 5, True, 3, 4), record("b", "lr", 40, True, 1, 4)]
    ar, lr = summarize(records, ["ar", "lr"])
    assert lr.speedup_median == pytest.approx(1.25) and lr.speedup_min == 0.5 and lr.speedup_max == 2.0
    assert lr.speedup_aggregate == pytest.approx(30 / 45) and lr.acceptance_rate == 0.5 and lr.accuracy == 1.0
    assert ar.accuracy == 0.5 and lr.tokens_per_s == pytest.approx(200 / 45)


def test_ctrl_c_loses_nothing_and_a_rerun_continues(sims, tmp_path, capsys):
    data = tmp_path / "gsm.jsonl"
    data.write_text("".join(json.dumps({"question": f"q{i}", "answer": "1"}) + "\n" for i in range(8)))
    out = tmp_path / "out"
    args = ["eval", "--dataset", "gsm8k", "--data", str(data), "--methods", "ar,lr", "--depth", "2",
            "--threshold", "0.5", "--out", str(out), *url_options(sims)]
    command = [*INTERRUPTIBLE_CLI, *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while not (results.exists() and len(results.read_text().splitlines()) >= 2):
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr.decode()
    kept = ResultStore(results).load()
    assert 2 <= len(kept) < 16
    finished = invoke(capsys, *args)  # the rerun, in this process
    assert finished.returncode == 0, finished.stderr
    keys = [EvalRecord.model_validate_json(line).key for line in results.read_text().splitlines()]
    assert len(keys) == len(set(keys)) == 16
    assert "| lr |" in finished.stdout


def test_sweep_on_simulated_servers_writes_table_3(tmp_path, capsys):
    data = tmp_path / "gsm.jsonl"
    data.write_text("".join(json.dumps({"question": f"q{i}", "answer": "1"}) + "\n" for i in range(2)))
    out = tmp_path / "sweep"
    finished = invoke(capsys, "sweep", "--dataset", "gsm8k", "--data", str(data), "--width", "1,2", "--depth", "1,2",
                      "--sim", "--sim-alpha", "0.7", "--sim-target-ms", "2", "--out", str(out))
    assert finished.returncode == 0, finished.stderr
    table = (out / "sweep.md").read_text()
    assert "| W \\ γ | 1 | 2 |" in table
    rows = [line for line in table.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2 and all(line.count("n/a /") == 2 and line.count("×") == 2 for line in rows)
    assert (out / "sweep.png").stat().st_size > 0
    methods = {json.loads(line)["method"] for line in (out / "results.jsonl").read_text().splitlines()}
    assert methods == {"ar", "lr-w1-d1", "lr-w1-d2", "lr-w2-d1", "lr-w2-d2"}
    bad = invoke(capsys, "sweep", "--dataset", "gsm8k", "--data", str(data), "--width", "0", "--sim", "--out", str(out))
    assert bad.returncode == 1 and "--width needs numbers >= 1" in bad.stderr


def test_ctrl_c_does_not_wait_for_a_request_in_flight(sims, tmp_path):
    data = tmp_path / "gsm.jsonl"
    data.write_text(json.dumps({"question": "q", "answer": "1"}) + "\n")
    command = [*INTERRUPTIBLE_CLI, "eval", "--dataset", "gsm8k", "--data",
               str(data), "--methods", "lr", "--depth", "2", "--threshold", "0.5", "--out", str(tmp_path / "out"),
               *url_options(sims)]
    target = sims.target.engine.state
    target.last_sampling = {}
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
        deadline = time.monotonic() + 120
        while not target.last_sampling:  # wait for the run's first target request
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        target.fault = "stall"  # from now on every target request hangs
        time.sleep(1.5)
        assert process.poll() is None
        process.send_signal(signal.SIGINT)
        started = time.monotonic()
        process.communicate(timeout=30)
        assert process.returncode == 130 and time.monotonic() - started < 5
    finally:
        sims.target.engine.state.fault = "ok"
