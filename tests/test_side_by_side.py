"""examples/side_by_side.py against simulated servers: methods beside AR, one line per problem, resumable."""

import importlib.util
import json
from pathlib import Path

import pytest

from lookahead_reasoning.eval.simserver import SimConfig

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "side_by_side.py"


def _script():
    spec = importlib.util.spec_from_file_location("side_by_side", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sims(sim_servers):
    with sim_servers(
        SimConfig(role="draft", decode_ms=0.5, steps=5, step_tokens=6),
        SimConfig(role="target", decode_ms=2.0, steps=5, step_tokens=6),
        SimConfig(role="judge", decode_ms=1.0, alpha=0.99, seed=1),
    ) as servers:
        yield servers


def test_methods_beside_ar_one_line_per_problem_and_a_rerun_resumes(sims, tmp_path, capsys):
    endpoints = tmp_path / "endpoints.json"
    endpoints.write_text(sims.endpoints().model_dump_json())
    data = tmp_path / "problems.jsonl"
    data.write_text("\n".join(json.dumps({"question": f"problem {i}?"}) for i in range(4)) + "\n")
    out = tmp_path / "out.jsonl"
    args = ["--endpoints", str(endpoints), "--data", str(data), "--problems", "1-2", "--methods", "sync-2,async-1,sync-2-streamed",
            "--max-tokens", "200", "--out", str(out)]
    script = _script()
    lines = script.main(args)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["problem"] for row in rows] == [1, 2]
    for row in rows:
        assert row["ar"]["tokens"] > 0 and row["sync-2"]["tokens"] == row["ar"]["tokens"]  # the same text here
        assert row["sync-2"]["accepted"] > 0 and set(row["sync-2"]["depths"]) == {2}
    assert lines[0].startswith("sync-2: ") and "answers equal to AR's 2/2" in lines[0]
    assert all(row["sync-2-streamed"]["tokens"] == row["sync-2"]["tokens"] for row in rows)  # the same steps kept
    capsys.readouterr()
    script.main(args[:5] + ["1-3"] + args[6:])  # problems 1 and 2 are in the file: only 3 runs
    assert [json.loads(line)["problem"] for line in out.read_text().splitlines()] == [1, 2, 3]
    assert sum(line.startswith("problem ") for line in capsys.readouterr().out.splitlines()) == 1


def test_the_wall_ratio_comes_with_the_problems_bootstrap_interval_and_the_median_problem():
    script = _script()
    assert script.wall_interval([10.0, 20.0], [5.0, 10.0]) is None  # too few problems to resample
    low, high = script.wall_interval([10.0, 20.0, 30.0, 40.0], [5.0, 10.0, 15.0, 20.0])
    assert low == pytest.approx(2.0) and high == pytest.approx(2.0)  # every problem twice as fast
    ar, lr = [60.0, 100.0, 80.0, 70.0, 90.0], [50.0, 130.0, 75.0, 70.0, 60.0]
    low, high = script.wall_interval(ar, lr)
    assert low < sum(ar) / sum(lr) < high and low < 1.0 < high
    rows = [{"problem": i, "ar": {"seconds": a, "tokens": 100, "answer": "1"},
             "m": {"seconds": b, "tokens": 100, "answer": "1", "accepted": 1, "judged": 2}}
            for i, (a, b) in enumerate(zip(ar, lr))]
    line = script.compare(rows, ["m"])[0]
    assert line.startswith(f"m: {sum(ar) / sum(lr):.3f}x AR wall [{low:.3f}, {high:.3f}], median problem 1.067x, ")


def test_a_method_must_name_its_engine_and_depth():
    with pytest.raises(SystemExit, match="ENGINE-DEPTH"):
        _script().method_config("fast", 100)


def test_adaptive_methods_start_as_lookahead_run_depth_adaptive_does():
    from lookahead_reasoning.cli.options import ADAPTIVE_FIRST_DEPTH

    config = _script().method_config("async-adaptive", 512)
    assert config.adaptive_depth and config.depth == ADAPTIVE_FIRST_DEPTH and config.engine == "async"
    assert _script().method_config("sync-3-streamed", 512).depth == 3


def _probe(c: float, j: float, b2: float):
    from lookahead_reasoning.eval.server_probe import LineFit, ServerProbe, WidthCost

    line = LineFit(fixed_s=0.1, per_token_s=0.01)
    return ServerProbe(
        target_url="http://t", draft_url="http://d", judge_url="http://t", tokens=40, short_tokens=10, repeats=3,
        fork=[WidthCost(width=2, single_s=1.0, batch_s=b2, b=b2), WidthCost(width=4, single_s=1.0, batch_s=2.0, b=2.0)],
        target=line, target_single_s=1.0, draft=line, draft_single_s=c, c=c, c_per_token=c, judge_s=j, judge_target_tokens=j,
        j=j, prefill_prompt_tokens=100, prefill_uncached_s_per_token=0.001, prefill_cached_s_per_token=0.0,
    )


def test_the_ceiling_replays_ars_own_steps_at_the_measured_acceptance():
    from lookahead_reasoning.eval.replay import ceiling_of, costs_from_probe, step_lengths

    script = _script()
    probe = _probe(c=0.5, j=0.1, b2=1.0)
    text = "one two three\n\nfour five\n\nsix seven eight nine\n\nten"
    rows = [{"problem": 0, "ar": {"seconds": 10.0, "tokens": 12, "text": text},
             "sync-2": {"accepted": 3, "judged": 4}},
            {"problem": 1, "ar": {"seconds": 30.0, "tokens": 40, "text": text * 2},
             "sync-2": {"accepted": 1, "judged": 4}}]
    alpha, total = script.ceiling(rows, "sync-2", probe)
    assert alpha == 0.5
    answers = [step_lengths(text, 12), step_lengths(text * 2, 40)]
    assert total == ceiling_of(answers, costs_from_probe(probe.model_dump()), "longest", 2, 0.5)
    _, streamed = script.ceiling([{**r, "sync-2-streamed": r["sync-2"]} for r in rows], "sync-2-streamed", probe)
    assert streamed == ceiling_of(answers, costs_from_probe(probe.model_dump()), "decision", 2, 0.5)
    assert script.ceiling(rows, "sync-adaptive", probe) is None
    assert script.ceiling([{**rows[0], "ar": {"seconds": 1.0, "tokens": 3}}], "sync-2", probe) is None  # no AR text


def test_a_probe_file_adds_the_ceilings_to_the_comparison(sims, tmp_path):
    endpoints = tmp_path / "endpoints.json"
    endpoints.write_text(sims.endpoints().model_dump_json())
    data = tmp_path / "problems.jsonl"
    data.write_text(json.dumps({"question": "problem?"}) + "\n")
    probe = tmp_path / "probe.json"
    probe.write_text(_probe(c=0.25, j=0.05, b2=1.0).model_dump_json())
    lines = _script().main(["--endpoints", str(endpoints), "--data", str(data), "--problems", "0", "--methods",
                            "sync-2,sync-adaptive", "--max-tokens", "200", "--out", str(tmp_path / "out.jsonl"),
                            "--probe", str(probe)])
    assert lines[1].startswith("  ceiling ") and "efficiency " in lines[1]
    assert not any(line.startswith("  ceiling") for line in lines[2:])  # none for adaptive γ
