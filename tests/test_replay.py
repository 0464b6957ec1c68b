"""The round rules' timelines on real step lengths (runtime/adaptive/round_rules.py) and `lookahead bench replay`."""

import json
import random

import pytest

from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.eval.replay import ceilings, costs_from_probe, load_answers, step_lengths
from lookahead_reasoning.runtime.adaptive.round_rules import RuleCosts, ar_time, replay, speedup


def steps_of(lengths, rule, depth, alpha, costs, seed=0):
    return replay(lengths, rule, depth, alpha, costs, random.Random(seed))


def test_at_full_acceptance_and_equal_steps_a_batched_round_is_the_papers_round():
    """γ = 1, every draft accepted, free branches, no judge: a round writes a draft step and a fork of two, and
    keeps two steps: (c + 1) per two steps."""
    costs = RuleCosts(target_token_s=1.0, c=0.5)
    lengths = [10] * 8
    assert steps_of(lengths, "longest", 1, 1.0, costs) == pytest.approx(4 * (0.5 * 10 + 10))
    assert speedup([lengths], costs, "longest", 1, 1.0) == pytest.approx(80 / 60)


def test_a_rejected_round_waits_for_its_longest_branch_only_when_batched():
    """α = 0: a batched round pays the longer of t_0 and t_1 after the draft; a streamed round only t_0, which ran
    while the draft wrote. Unequal steps make the difference."""
    costs = RuleCosts(target_token_s=1.0, c=0.5, judge_s=2.0)
    lengths = [10, 80, 10, 80, 10]
    batched = steps_of(lengths, "longest", 1, 0.0, costs)
    streamed = steps_of(lengths, "decision", 1, 0.0, costs)
    # per round: the draft, then the longer branch, then the judge; the last step is written alone
    assert batched == pytest.approx(sum(0.5 * lengths[p] + max(lengths[p], lengths[p + 1]) + 2 for p in range(4)) + 10)
    assert streamed == pytest.approx(sum(lengths[p] + 2 for p in range(4)) + 10)
    assert ar_time(lengths, costs) == sum(lengths)


def test_the_rules_are_seeded_draws_and_costs_interpolate_b():
    costs = RuleCosts(target_token_s=1.0, c=0.4, judge_s=1.0, widths=((2, 1.1), (4, 1.5)))
    assert costs.b(1) == 1.0 and costs.b(3) == pytest.approx(1.3) and costs.b(6) == pytest.approx(1.9)
    answers = [[17, 40, 80, 25], [60, 12, 33]]
    for rule in ("longest", "decision", "async"):
        assert speedup(answers, costs, rule, 2, 0.6) == speedup(answers, costs, rule, 2, 0.6)
        assert speedup(answers, costs, rule, 2, 0.9) > speedup(answers, costs, rule, 2, 0.2)


def test_costs_come_from_a_probe_file_and_answers_from_eval_results(tmp_path):
    probe = {"target": {"fixed_s": -0.01, "per_token_s": 0.2}, "c": 0.5, "c_per_token": 0.45, "judge_s": 1.2,
             "fork": [{"width": 2, "b": 1.02}, {"width": 3, "b": 1.1}], "target_beside_draft": 1.3,
             "draft_beside_target": 0.9}
    costs = costs_from_probe(probe)
    assert (costs.target_token_s, costs.request_s, costs.c, costs.judge_s) == (0.2, 0.0, 0.45, 1.2)
    assert costs.widths == ((2, 1.02), (3, 1.1)) and costs.target_beside_draft == 1.3
    assert costs.draft_beside_target == 1.0  # never faster beside the other
    with pytest.raises(LookaheadError, match="server probe"):
        costs_from_probe({"c": 1})
    results = tmp_path / "results.jsonl"
    records = [{"method": "ar", "text": "a b c\n\nd e f g h i\n\nj", "output_tokens": 10},
               {"method": "lr", "text": "x", "output_tokens": 1}]
    results.write_text("\n".join(json.dumps(r) for r in records) + "\n{torn")
    assert load_answers(results) == [step_lengths(records[0]["text"], 10)]
    assert sum(step_lengths(records[0]["text"], 10)) == 10 and len(step_lengths(records[0]["text"], 10)) == 3
    assert step_lengths("a" * 50 + "\n\nb", 300, cap=100)[0] == 100  # capped as a step is
    with pytest.raises(LookaheadError, match="no 'sync' answers"):
        load_answers(tmp_path / "results.jsonl", method="sync")


def test_bench_replay_prints_every_rule_depth_and_alpha(tmp_path, capsys):
    from cli_invoke import invoke, one_line_error

    results = tmp_path / "results.jsonl"
    text = "\n\n".join("w " * n for n in (17, 40, 80, 25, 33))
    results.write_text(json.dumps({"method": "ar", "text": text, "output_tokens": 195}) + "\n")
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"target": {"fixed_s": 0.0, "per_token_s": 0.2}, "c": 0.45, "judge_s": 1.0,
                                 "fork": [{"width": 2, "b": 1.0}, {"width": 3, "b": 1.05}]}))
    done = invoke(capsys, "bench", "replay", str(results), "--probe", str(probe), "--depths", "1,2",
                  "--alphas", "0.5,1", "--json")
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    assert table["answers"] == 1 and table["steps"] == 5
    found = {(c["rule"], c["depth"], c["alpha"]): c["speedup"] for c in table["ceilings"]}
    assert len(found) == 3 * 2 * 2
    expected = ceilings(load_answers(results), costs_from_probe(json.loads(probe.read_text())), depths=(1, 2),
                        alphas=(0.5, 1.0))
    assert found == {(c.rule, c.depth, c.alpha): c.speedup for c in expected}
    text_out = invoke(capsys, "bench", "replay", str(results), "--probe", str(probe), "--depths", "1")
    assert "ends at its decision" in text_out.stdout and "α 0.63" in text_out.stdout
    one_line_error(invoke(capsys, "bench", "replay", str(results)), "--probe")
