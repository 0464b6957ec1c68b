"""Verifiers beyond the LLM judge, their metrics on a small labelled set, and calibration."""

import json
import re

import pytest
from cli_invoke import invoke, one_line_error

from lookahead_reasoning.eval.verifier_study import LabelledPair, calibrate, evaluate, judge_all, load_pairs, metrics
from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.verifiers.base import Verdict
from lookahead_reasoning.verifiers.calibration import Calibration, load_calibration, save_calibration
from lookahead_reasoning.verifiers.numbers import numbers_in, same_result
from lookahead_reasoning.cli.options import VERIFIERS, make_config
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.verifiers.math_gate import MathGate
from lookahead_reasoning.verifiers.numbers import NumbersGate
from lookahead_reasoning.verifiers.random_accept import RandomVerifier
from lookahead_reasoning.verifiers.registry import (
    DEFAULT_THRESHOLDS, GATE_METHODS, VERIFIER_NAMES, base_verifier, gates_of, make_verifier, resolve_threshold,
)

PAIRS = [
    ("First, 16 - 3 - 4 = 9 eggs are left.", "She has 16 eggs and uses 3 and 4, so 9 eggs remain.", True),
    ("First, 16 - 3 - 4 = 9 eggs are left.", "She has 16 eggs and uses 3 and 4, so 7 eggs remain.", False),
    ("Half of 48 is 48/2 = 24 clips.", "She sold half as many: 48/2 = 24 clips in May.", True),
    ("Half of 48 is 48/2 = 24 clips.", "She sold twice as many: 48*2 = 96 clips in May.", False),
    ("The total is 48 + 24 = 72.", "Adding April and May gives 48 + 24 = 72 clips.", True),
    ("The total is 48 + 24 = 72.", "The weather in Paris is mild in spring.", False),
]
LABELLED = [LabelledPair(step_a=a, step_b=b, equivalent=e) for a, b, e in PAIRS]


@pytest.fixture(autouse=True)
def calibration_file(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOKAHEAD_CALIBRATION", str(tmp_path / "calibration.json"))


def test_metrics_count_equivalent_as_positive():
    m = metrics([True, True, False, False], [True, False, True, False], 0.5)
    assert (m.precision, m.recall, m.accuracy, m.threshold, m.n) == (0.5, 0.5, 0.5, 0.5, 4)
    assert metrics([False], [False], None).precision is None


def test_numbers_are_read_as_values():
    assert numbers_in("48 / 2 = 24, so $1,000.0 in total") == [48, 2, 24, 1000]
    assert numbers_in("1/2 * 1/2 = 1/4, step 3.50 and x2") == [0.5, 0.5, 0.25, 3.5]
    assert numbers_in("Area = 8 m * 5 m = 40 m^2, c^2 too") == [8, 5, 40]
    assert same_result("1/2 * 1/2 = 1/4.", "probability 0.25") and not same_result("= 1/4", "0.5")
    assert same_result("no numbers", "none here") and not same_result("it is 3", "no numbers")


def test_embedding_verifiers_on_labelled_pairs():
    embedding = make_verifier("embedding", 0.5, fast_path=False)
    scores = [v.score for v in judge_all(embedding, LABELLED)]
    assert all(-1.0 <= s <= 1.0 for s in scores)
    assert scores[5] < 0.3 < scores[2]  # unrelated vs paraphrase
    assert scores[3] > 0.6  # cosine alone cannot see 24 vs 96
    numbers = make_verifier("embedding-numbers", 0.5, fast_path=False)
    result = evaluate(numbers, LABELLED, 0.5)
    assert (result.precision, result.recall, result.accuracy, result.n) == (1.0, 1.0, 1.0, 6)
    plain = evaluate(embedding, LABELLED, 0.5)
    assert plain.precision < 1.0 and plain.recall == 1.0  # it accepts the wrong-number pairs


def test_random_accepts_at_its_rate_and_exact_only_equal_steps():
    verifier = make_verifier("random", 0.3)
    verdicts = verifier.verify("", [("a", "b")] * 2000)
    assert 0.25 < sum(v.accept for v in verdicts) / 2000 < 0.35
    again = make_verifier("random", 0.3).verify("", [("a", "b")] * 50)
    assert [v.accept for v in again] == [v.accept for v in verdicts[:50]]  # seeded
    exact = make_verifier("exact")
    assert [v.accept for v in exact.verify("", [("A  b", "a b"), ("a", "b")])] == [True, False]


def test_a_random_draw_depends_on_the_pair_alone():
    # a resumed eval judges a problem in a fresh process: its steps must meet the same draws
    pairs = [(f"step {i}", f"other step {i}") for i in range(40)]
    alone = [v.accept for v in make_verifier("random", 0.5).verify("the context", pairs)]
    after_others = make_verifier("random", 0.5)
    after_others.verify("an earlier problem", [("x", "y")] * 7)
    assert [v.accept for v in after_others.verify("the context", pairs)] == alone
    assert 10 < sum(alone) < 30
    assert [v.accept for v in make_verifier("random", 0.5, seed=1).verify("the context", pairs)] != alone


def test_calibration_keeps_precision_and_is_found_again():
    labels = [True, True, True, False, False, True]
    verdicts = [Verdict(True, s, "llm-judge") for s in (0.95, 0.9, 0.7, 0.85, 0.3, 0.6)]
    pairs = [LabelledPair(step_a="a", step_b="b", equivalent=y) for y in labels]
    chosen = calibrate(pairs, verdicts, "pairs.jsonl", min_precision=0.9)
    # 0.6 would accept the 0.85 negative (precision 0.8); 0.86..0.9 keeps precision 1.0 with recall 0.5
    assert chosen.threshold == 0.9 and chosen.precision == 1.0 and chosen.recall == 0.5 and chosen.met_precision
    loose = calibrate(pairs, verdicts, "pairs.jsonl", min_precision=0.75)
    assert loose.threshold == 0.6 and loose.accuracy == 5 / 6
    # an exact match is accepted at any threshold, as at run time, even without a score to compare
    exact_verdicts = [Verdict(True, None, "exact")] + verdicts[1:]
    strict = calibrate(pairs, exact_verdicts, "p", 0.99)
    assert (strict.threshold, strict.precision, strict.recall) == (0.9, 1.0, 0.5)  # without it, recall 0.25
    save_calibration("llm-judge", "model-x", chosen)
    assert load_calibration("llm-judge", "model-x").threshold == 0.9
    assert load_calibration("llm-judge", "model-y") is None
    assert resolve_threshold("llm-judge", None, "model-x") == 0.9
    assert resolve_threshold("llm-judge", 0.4, "model-x") == 0.4
    assert resolve_threshold("llm-judge", None, "model-y") == DEFAULT_THRESHOLDS["llm-judge"]


def test_unknown_verifier_and_bad_pair_files(tmp_path):
    with pytest.raises(ValueError, match="unknown verifier"):
        make_verifier("oracle")
    bad = tmp_path / "pairs.jsonl"
    bad.write_text('{"step_a": "a", "step_b": "b", "equivalent": true}\n{"step_a": "a"}\n')
    with pytest.raises(LookaheadError, match=r"pairs.jsonl:2: record lacks the field\(s\) step_b"):
        load_pairs(bad)
    bad.write_text('{"step_a": "a", "step_b": "b", "equivalent": "yes"}\n')
    with pytest.raises(LookaheadError, match="true or false"):
        load_pairs(bad)


def test_verifiers_cli_evaluate_and_calibrate(tmp_path, monkeypatch, capsys):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"step_a": a, "step_b": b, "equivalent": e}) + "\n" for a, b, e in PAIRS))
    monkeypatch.setenv("LOOKAHEAD_CALIBRATION", str(tmp_path / "cal.json"))
    done = invoke(capsys, "verifiers", "evaluate", "--pairs", str(pairs), "--verifier", "embedding-numbers", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) == {"precision", "recall", "f1", "accuracy", "threshold", "n", "precision_ci", "recall_ci",
                           "f1_ci"} and result["n"] == 6
    assert result["threshold"] == DEFAULT_THRESHOLDS["embedding-numbers"]
    calibrated = invoke(capsys, "verifiers", "calibrate", "--pairs", str(pairs), "--verifier", "embedding", "--json")
    assert calibrated.returncode == 0, calibrated.stderr
    saved = json.loads((tmp_path / "cal.json").read_text())
    (key,) = saved
    assert key.startswith("embedding@") and Calibration.model_validate(saved[key]).n == 6
    assert json.loads(calibrated.stdout)["threshold"] == saved[key]["threshold"]
    again = invoke(capsys, "verifiers", "evaluate", "--pairs", str(pairs), "--verifier", "embedding", "--json")
    assert json.loads(again.stdout)["threshold"] == saved[key]["threshold"]  # found where run and eval look
    one_line_error(invoke(capsys, "verifiers", "calibrate", "--pairs", str(pairs), "--verifier", "random"),
                   "no score to calibrate")
    one_line_error(invoke(capsys, "verifiers", "evaluate", "--pairs", str(pairs), "--verifier", "nope"),
                   "unknown verifier 'nope'")


def test_one_registry_names_the_verifiers_for_the_config_and_the_cli():
    assert {"llm-judge+math", "llm-judge+numbers+math", "random+numbers+math"} <= set(VERIFIER_NAMES)
    for name in VERIFIER_NAMES:
        assert LookaheadConfig(verifier=name).verifier == name
        assert name in VERIFIERS  # every --verifier option's help
        assert DEFAULT_THRESHOLDS[name] == DEFAULT_THRESHOLDS[base_verifier(name)]
        assert base_verifier(name) + "".join("+" + gate for gate in gates_of(name)) == name
    assert GATE_METHODS == ("numbers", "math")
    for unknown in ("oracle", "llm-judge+math+numbers", "exact+math"):
        with pytest.raises(LookaheadError, match="llm-judge\\+numbers\\+math"):  # the error lists the known names
            make_config(verifier=unknown)
        with pytest.raises(ValueError, match=re.escape(f"unknown verifier '{unknown}'; known: exact, llm-judge")):
            make_verifier(unknown)


def test_an_unknown_verifier_is_one_line_that_lists_the_known_ones(capsys):
    failed = invoke(capsys, "run", "What is 2 + 2?", "--verifier", "llm-judge+maths",
                    "--draft-url", "http://127.0.0.1:9", "--target-url", "http://127.0.0.1:9")
    one_line_error(failed, "invalid verifier")
    assert all(name in failed.stderr for name in VERIFIER_NAMES)


def test_gates_stand_in_front_of_their_verifier_in_the_order_named():
    both = make_verifier("random+numbers+math", 1.0)  # random at 1.0 accepts whatever the gates let through
    assert isinstance(both, MathGate) and isinstance(both.inner, NumbersGate)
    assert isinstance(both.inner.inner, RandomVerifier) and both.name == "random+numbers+math"
    context = "The points are (2, -6) and (-4, 3)."
    pairs = [("\\( d = \\sqrt{(-4 - 2)^2 + 81} \\)\n\n", "\\( d = \\sqrt{(-6 - 2)^2 + 81} \\)\n\n"),  # d differs
             ("16 - 3 - 4 = 9 eggs.\n\n", "16 - 3 - 4 = 7 eggs.\n\n"),  # a new number, and another result
             ("So x = 2 + 3.\n\n", "So x = 5.\n\n")]  # the same (5 is in the context)
    verdicts = both.verify(context + " 5", pairs)
    assert [(v.accept, v.method) for v in verdicts] == [(False, "math"), (False, "math"), (True, "random")]
    numbers_only = make_verifier("random+numbers", 1.0).verify(context + " 5", pairs)
    assert [(v.accept, v.method) for v in numbers_only] == [(True, "random"), (False, "numbers"), (True, "random")]
    math_only = make_verifier("random+math", 1.0)
    assert isinstance(math_only, MathGate) and isinstance(math_only.inner, RandomVerifier)
