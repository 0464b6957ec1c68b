"""`lookahead eval`'s problem choice (--problems, --ar-finishes, --limit), concurrency, the lr-random
ablation, accuracy intervals and `lookahead report` on a half-finished folder."""

import json
import threading
import time

import pytest
from cli_invoke import invoke, one_line_error
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.eval.datasets import Problem, load_problems, problem_span
from lookahead_reasoning.eval.records import EvalRecord
from lookahead_reasoning.eval.report import kept_records, paired_difference, summarize, wilson_interval
from lookahead_reasoning.eval.runner import parse_methods, run_eval, run_problems
from lookahead_reasoning.eval.simserver import SimConfig
from lookahead_reasoning.runtime.config import LookaheadConfig

CONFIG = LookaheadConfig(depth=2, max_tokens=400, max_step_tokens=20, verifier="llm-judge", verifier_threshold=0.5,
                         request_timeout_s=10)


@pytest.fixture(scope="module")
def sims(sim_servers):
    with sim_servers(
        SimConfig(role="draft", decode_ms=1.0, steps=4, step_tokens=4),
        SimConfig(role="target", decode_ms=4.0, steps=4, step_tokens=4),
        SimConfig(role="judge", decode_ms=1.0, alpha=0.95, seed=3),
    ) as servers:
        yield servers


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "gsm.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(6)))
    return path


def problem(i: int) -> Problem:
    return Problem(id=f"p{i}", message=f"q{i}", reference="1", grader="math")


def test_problem_spans_pick_indices_and_keep_their_ids(data):
    chosen = load_problems("gsm8k", data, span=problem_span("2-4"))
    assert [p.message.split("\n")[0] for p in chosen] == [f"What is {i} + {i}?" for i in (2, 3, 4)]
    assert [p.id for p in chosen] == [p.id for p in load_problems("gsm8k", data)[2:5]]
    assert len(load_problems("gsm8k", data, limit=1, span=problem_span("3"))) == 1
    for bad in ("a-b", "4-2", "-1"):
        with pytest.raises(LookaheadError, match="--problems takes"):
            problem_span(bad)
    with pytest.raises(LookaheadError, match="starts at 9, but there are 6"):
        load_problems("gsm8k", data, span=problem_span("9-12"))


def test_run_problems_keeps_the_first_n_in_order_and_never_starts_more_than_needed():
    started, lock = [], threading.Lock()

    def run(p: Problem) -> bool:
        with lock:
            started.append(p.id)
        time.sleep(0.02 * (int(p.id[1:]) % 3))  # finish out of order
        return int(p.id[1:]) % 2 == 0  # even problems are kept

    kept = run_problems([problem(i) for i in range(20)], run, concurrency=3, keep=4)
    assert [p.id for p in kept] == ["p0", "p2", "p4", "p6"]
    assert len(started) < 20 and len(started) <= 8 + 3  # stops starting once kept + in flight reach 4
    everything = run_problems([problem(i) for i in range(5)], lambda p: True, concurrency=2, keep=None)
    assert [p.id for p in everything] == [f"p{i}" for i in range(5)]


def test_a_failing_problem_stops_new_starts_and_is_raised_after_the_others_finish():
    finished = []

    def run(p: Problem) -> bool:
        if p.id == "p1":
            raise LookaheadError("p1 failed")
        time.sleep(0.1)
        finished.append(p.id)
        return True

    with pytest.raises(LookaheadError, match="p1 failed"):
        run_problems([problem(i) for i in range(10)], run, concurrency=2, keep=None)
    assert "p0" in finished and len(finished) <= 3


def test_concurrent_eval_gives_the_records_a_serial_one_does(sims, data, tmp_path):
    problems = load_problems("gsm8k", data)
    methods = parse_methods("ar,lr", CONFIG)
    serial = run_eval(problems, methods, sims.endpoints(), tmp_path / "one", {"dataset": "gsm8k"})
    parallel = run_eval(problems, methods, sims.endpoints(), tmp_path / "three", {"dataset": "gsm8k"}, concurrency=3)
    assert {r.key: r.text for r in serial} == {r.key: r.text for r in parallel}
    lines = (tmp_path / "three" / "results.jsonl").read_text().splitlines()
    assert len(lines) == len({EvalRecord.model_validate_json(line).key for line in lines}) == 12


def test_ar_finishes_runs_no_other_method_where_ar_was_cut(sims, data, tmp_path):
    problems = load_problems("gsm8k", data)
    cut = CONFIG.model_copy(update={"max_tokens": 6})  # every simulated AR answer is longer
    records = run_eval(problems, parse_methods("ar,lr", cut), sims.endpoints(), tmp_path / "cut", {"dataset": "gsm8k"},
                       ar_finishes=True, keep=2)
    assert records == []
    written = [EvalRecord.model_validate_json(line) for line in (tmp_path / "cut" / "results.jsonl").read_text().splitlines()]
    assert {r.method for r in written} == {"ar"} and len(written) == 6 and all(r.finish == "max_tokens" for r in written)
    records = run_eval(problems, parse_methods("ar,lr", CONFIG), sims.endpoints(), tmp_path / "whole",
                       {"dataset": "gsm8k"}, ar_finishes=True, keep=2, concurrency=2)
    assert sorted({r.problem_id for r in records}) == [p.id for p in problems[:2]] and len(records) == 4
    with pytest.raises(LookaheadError, match="ar as the first method"):
        run_eval(problems, parse_methods("lr,ar", CONFIG), sims.endpoints(), tmp_path / "x", {}, ar_finishes=True)


def test_lr_random_accepts_about_half_of_what_the_judge_would(sims, data, tmp_path):
    problems = load_problems("gsm8k", data)
    records = run_eval(problems, parse_methods("lr,lr-random", CONFIG), sims.endpoints(), tmp_path / "out",
                       {"dataset": "gsm8k"})
    summary = {s.method: s for s in summarize(records, ["lr", "lr-random"])}
    assert summary["lr"].acceptance_rate > 0.8  # the simulated judge says yes 95 % of the time
    assert 0.2 < summary["lr-random"].acceptance_rate < 0.8


# The score interval's closed form with z = 1.96: (p + z²/2n)/(1 + z²/n) ± z·sqrt(p(1−p)/n + z²/4n²)/(1 + z²/n).
# scipy takes z from the normal quantile (1.95996...), which moves the bounds by under 1e-5.
WILSON_CLOSED_FORM = {(8, 10): (0.49015685, 0.94331905), (0, 5): (0.0, 0.43449149), (5, 5): (0.56550851, 1.0),
                      (1, 2): (0.09452865, 0.90547135), (37, 50): (0.60446578, 0.84128620),
                      (171, 200): (0.79951219, 0.89710715)}


def test_wilson_interval_matches_the_closed_form_and_its_edges():
    for (right, n), bounds in WILSON_CLOSED_FORM.items():
        assert wilson_interval(right, n) == pytest.approx(bounds, abs=1e-5), (right, n)
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0 and wilson_interval(0, 0) is None


def test_paired_difference_matches_resampling_the_pairs_by_hand():
    # the figures of the same percentile bootstrap written out with numpy (seeded index draws, resample means,
    # np.percentile): another generator's draws move the bounds by Monte Carlo error, under one pair's 1/n
    for pairs, mean, bounds in (
        ([(True, False)] * 7 + [(False, True)] * 2 + [(True, True)] * 21 + [(False, False)] * 10, 0.125,
         (0.0, 0.275)),
        ([(True, False)] * 3 + [(True, True)] * 40 + [(False, True)] * 12 + [(False, False)] * 5, -0.15,
         (-0.2667, -0.0333)),
    ):
        got_mean, got = paired_difference(pairs)
        assert got_mean == pytest.approx(mean) and got == pytest.approx(bounds, abs=1 / len(pairs))
    assert paired_difference([(True, False)]) == (1.0, (1.0, 1.0))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=40))
def test_paired_difference_interval_holds_its_mean(pairs):
    mean, (low, high) = paired_difference(pairs)
    assert mean == pytest.approx(sum(a - b for a, b in pairs) / len(pairs))
    assert -1.0 <= low <= mean + 1e-9 and mean - 1e-9 <= high <= 1.0
    if all(a == b for a, b in pairs):
        assert low == high == 0.0


def record(pid: str, method: str, correct: bool, finish: str = "eos") -> EvalRecord:
    return EvalRecord(problem_id=pid, method=method, sample=0, correct=correct, wall_s=1.0, prompt_tokens=1,
                      output_tokens=10, finish=finish, text="")


def test_the_summary_pairs_accuracy_against_ar_and_drops_problems_ar_did_not_finish():
    records = [record("a", "ar", True), record("a", "lr", True), record("b", "ar", True), record("b", "lr", False),
               record("c", "ar", False, "max_tokens"), record("c", "lr", True)]
    kept = kept_records(records, ar_finishes=True)
    assert {r.problem_id for r in kept} == {"a", "b"} and kept_records(records, ar_finishes=False) == records
    ar, lr = summarize(kept, ["ar", "lr"])
    assert ar.accuracy == 1.0 and ar.accuracy_vs_baseline is None and lr.accuracy_vs_baseline == -0.5
    assert lr.accuracy_ci == wilson_interval(1, 2) and lr.accuracy_vs_baseline_ci[0] == -1.0
    lr_vs, ar_vs = summarize(kept, ["lr", "ar"], baseline="lr")
    assert lr_vs.accuracy_vs_baseline is None and ar_vs.accuracy_vs_baseline == 0.5 and ar_vs.baseline == "lr"


def test_report_reads_a_half_finished_folder_and_says_what_is_missing(sims, data, tmp_path, capsys):
    out = tmp_path / "out"
    options = ["--draft-url", sims.draft.url, "--target-url", sims.target.url, "--judge-url", sims.judge.url,
               "--chat-template", "chatml", "--depth", "2", "--threshold", "0.5"]
    done = invoke(capsys, "eval", "--dataset", "gsm8k", "--data", str(data), "--methods", "ar,lr,lr-random",
                  "--problems", "1-2", "--concurrency", "2", "--out", str(out), *options)
    assert done.returncode == 0, done.stderr
    results = out / "results.jsonl"
    lines = results.read_text().splitlines()
    results.write_text("\n".join(lines[:4]) + "\n" + lines[4][:30])  # cut short, a torn last line
    for name in ("report.md", "report.json", "report.png"):
        (out / name).unlink()
    report = invoke(capsys, "report", str(out))
    assert report.returncode == 0, report.stderr
    assert "| ar |" in report.stdout and "accuracy % [95 % CI]" in report.stdout
    assert "2 problems at once" in report.stdout
    summary = json.loads((out / "report.json").read_text())
    assert sum(m["n"] for m in summary["methods"]) == 4 and (out / "report.png").stat().st_size > 0
    against_random = invoke(capsys, "report", str(out), "--baseline", "lr-random")
    assert against_random.returncode == 0, against_random.stderr
    assert "vs lr-random, points" in against_random.stdout and "report-vs-lr-random.json" in against_random.stderr
    vs_random = json.loads((out / "report-vs-lr-random.json").read_text())
    assert vs_random["baseline"] == "lr-random" and (out / "report-vs-lr-random.png").stat().st_size > 0
    assert json.loads((out / "report.json").read_text()) == summary  # the report against AR is left as it was
    one_line_error(invoke(capsys, "report", str(out), "--baseline", "sync-3"), "not a method of")
    one_line_error(invoke(capsys, "report", str(tmp_path / "nothing")), "holds no results.jsonl")
    resumed = invoke(capsys, "eval", "--dataset", "gsm8k", "--data", str(data), "--methods", "ar,lr,lr-random",
                     "--problems", "1-2", "--concurrency", "1", "--out", str(out), *options)
    assert resumed.returncode == 1 and "other settings (concurrency differ)" in resumed.stderr


def test_report_pools_disjoint_folders_of_one_dataset_and_names_what_differs(sims, data, tmp_path, capsys):
    options = ["--draft-url", sims.draft.url, "--target-url", sims.target.url, "--judge-url", sims.judge.url,
               "--chat-template", "chatml", "--threshold", "0.5", "--methods", "ar,lr"]
    first, second, pooled = tmp_path / "first", tmp_path / "second", tmp_path / "pooled"
    for out, problems, depth in ((first, "0-1", "2"), (second, "2-4", "3")):
        done = invoke(capsys, "eval", "--dataset", "gsm8k", "--data", str(data), "--problems", problems,
                      "--depth", depth, "--out", str(out), *options)
        assert done.returncode == 0, done.stderr
    report = invoke(capsys, "report", str(first), str(second), "--out", str(pooled))
    assert report.returncode == 0, report.stderr
    assert "gsm8k: 5 problems" in report.stdout and "depth 2 / 3" in report.stdout
    summary = json.loads((pooled / "report.json").read_text())
    assert [m["n"] for m in summary["methods"]] == [5, 5] and (pooled / "report.png").stat().st_size > 0
    singles = [json.loads((f / "report.json").read_text())["methods"][0]["n"] for f in (first, second)]
    assert singles == [2, 3]  # each folder's own report is left as it was
    one_line_error(invoke(capsys, "report", str(first), str(second)), "needs --out")
    one_line_error(invoke(capsys, "report", str(first), str(first), "--out", str(pooled)), "is in both")
    other = tmp_path / "other"
    other.mkdir()
    (other / "results.jsonl").write_text((first / "results.jsonl").read_text())
    pin = json.loads((first / "eval.json").read_text())
    (other / "eval.json").write_text(json.dumps({**pin, "dataset": "math500"}))
    one_line_error(invoke(capsys, "report", str(second), str(other), "--out", str(pooled)), "differ in their dataset")


def test_a_pin_holds_the_settings_that_shape_answers_so_a_batched_run_resumes_without_the_hand_off(
        sims, data, tmp_path, capsys):
    out = tmp_path / "batched"
    options = ["--dataset", "gsm8k", "--data", str(data), "--methods", "ar,lr", "--depth", "2", "--threshold", "0.5",
               "--draft-url", sims.draft.url, "--target-url", sims.target.url, "--judge-url", sims.judge.url,
               "--chat-template", "chatml", "--out", str(out)]
    done = invoke(capsys, "eval", *options, "--problems", "0", "--fork", "batched")
    assert done.returncode == 0, done.stderr
    config = json.loads((out / "eval.json").read_text())["config"]
    assert config["fork"] == "batched" and "handoff_tokens" not in config and "request_timeout_s" not in config
    more = invoke(capsys, "eval", *options, "--problems", "0-1", "--fork", "batched", "--timeout", "30")
    assert more.returncode == 0, more.stderr  # another timeout is not another setting
    streamed = invoke(capsys, "eval", *options, "--problems", "0-1")
    assert streamed.returncode == 1 and "other settings (config differ)" in streamed.stderr
    assert "handoff_tokens" in LookaheadConfig().model_dump(exclude=LookaheadConfig().fields_without_effect())
