"""The verifier study: pairs with context and splits, bootstrap intervals, thresholds chosen on dev only,
the score cache, and the numbers gate."""

import json
from typing import get_args

import numpy as np
import pytest
from cli_invoke import invoke, one_line_error
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_reasoning.cli.options import VERIFIERS
from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.eval.verifier_report import SCORES_FILE, run_study, write_study
from lookahead_reasoning.eval.verifier_study import (
    BATCH, LabelledPair, accepted_at, bootstrap_intervals, calibrate, judge_all, load_pairs, metrics, select_split,
)
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.verifiers.base import FastPathVerifier, Verdict
from lookahead_reasoning.verifiers.numbers import NumbersGate, new_numbers
from lookahead_reasoning.verifiers.registry import DEFAULT_THRESHOLDS, VERIFIER_NAMES, make_verifier, verifier_model


class Scripted:
    """A verifier with fixed scores by draft step, recording what it was asked."""

    def __init__(self, scores: dict[str, float], name: str = "llm-judge"):
        self.scores, self.name, self.calls = scores, name, []

    def verify(self, context, pairs):
        self.calls.append((context, list(pairs)))
        return [Verdict(self.scores[d] >= 0.5, self.scores[d], self.name) for _, d in pairs]


def write_pairs(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def pair(draft, equivalent, split=None, context="", id=None):
    return LabelledPair(step_a="target", step_b=draft, equivalent=equivalent, split=split, context=context, id=id)


# --- pair files, splits, batching -------------------------------------------------------------------


def test_pairs_keep_id_context_and_split(tmp_path):
    path = write_pairs(tmp_path / "p.jsonl", [
        {"id": "a", "step_a": "x", "step_b": "y", "equivalent": True, "context": "Q: 16 eggs", "split": "dev",
         "question": "?", "label_notes": "fine"},
        {"step_a": "x", "step_b": "z", "equivalent": False},
    ])
    first, second = load_pairs(path)
    assert (first.id, first.context, first.split) == ("a", "Q: 16 eggs", "dev")
    assert (second.id, second.context, second.split) == (None, "", None)
    write_pairs(path, [{"id": "a", "step_a": "x", "step_b": "y", "equivalent": True}] * 2)
    with pytest.raises(LookaheadError, match="id 'a' repeats pair 1"):
        load_pairs(path)
    write_pairs(path, [{"step_a": "x", "step_b": "y", "equivalent": True, "context": ["not", "text"]}])
    with pytest.raises(LookaheadError, match="context must be a string"):
        load_pairs(path)


def test_a_split_keeps_its_pairs_and_says_when_there_is_none(tmp_path):
    pairs = [pair("a", True, "dev"), pair("b", False, "test"), pair("c", True, "dev")]
    assert [p.step_b for p in select_split(pairs, "dev", tmp_path)] == ["a", "c"]
    assert select_split(pairs, None, tmp_path) == pairs
    with pytest.raises(LookaheadError, match="no pair in .* has split 'train'; its splits: dev, test"):
        select_split(pairs, "train", tmp_path)
    with pytest.raises(LookaheadError, match="has no split field"):
        select_split([pair("a", True)], "dev", tmp_path)


def test_judge_all_gives_each_run_of_one_context_one_call_of_at_most_a_batch():
    contexts = ["A"] * (BATCH + 2) + ["B"] * 2 + ["A"]
    pairs = [pair(f"d{i}", True, context=c) for i, c in enumerate(contexts)]
    verifier = Scripted({p.step_b: 0.9 for p in pairs})
    verdicts = judge_all(verifier, pairs)
    assert len(verdicts) == len(pairs)
    assert [(c, len(asked)) for c, asked in verifier.calls] == [("A", BATCH), ("A", 2), ("B", 2), ("A", 1)]
    assert [d for _, asked in verifier.calls for _, d in asked] == [p.step_b for p in pairs]  # order kept


# --- metrics and bootstrap intervals ------------------------------------------------------------------


def test_metrics_give_f1():
    m = metrics([True, True, True, False], [True, True, False, True], None)
    assert (m.precision, m.recall, m.f1) == (2 / 3, 2 / 3, 2 / 3)
    assert m.precision_ci is None  # intervals only when asked for
    assert metrics([False, False], [False, False], None).f1 is None


def _example(scale: int):
    # 8 TP, 2 FP, 3 FN, 7 TN, repeated `scale` times
    labels = ([True] * 8 + [False] * 2 + [True] * 3 + [False] * 7) * scale
    accepted = ([True] * 10 + [False] * 10) * scale
    return labels, accepted


def test_bootstrap_intervals_hold_the_estimate_and_narrow_with_more_pairs():
    small = bootstrap_intervals(*_example(1))
    large = bootstrap_intervals(*_example(10))
    point = metrics(*_example(1), None)
    for name, value in (("precision", point.precision), ("recall", point.recall), ("f1", point.f1)):
        low, high = small[name]
        assert low < value < high, name
        assert large[name][0] < value < large[name][1]
        assert large[name][1] - large[name][0] < 0.5 * (high - low), name  # about 1/sqrt(10) as wide
    assert bootstrap_intervals(*_example(1), seed=0) == small  # seeded
    assert bootstrap_intervals(*_example(1), seed=1) != small


def test_bootstrap_matches_resampling_pairs_one_by_one():
    labels, accepted = _example(2)
    y, a = np.array(labels), np.array(accepted)
    rng = np.random.default_rng(7)
    precisions = []
    for _ in range(4000):
        i = rng.integers(0, len(y), len(y))
        tp, fp = (y[i] & a[i]).sum(), (~y[i] & a[i]).sum()
        if tp + fp:
            precisions.append(tp / (tp + fp))
    low, high = np.percentile(precisions, [2.5, 97.5])
    ours = bootstrap_intervals(labels, accepted, resamples=4000)["precision"]
    assert ours == pytest.approx((low, high), abs=0.03)


def test_bootstrap_matches_the_multinomial_bootstrap_figures():
    # the figures of the same percentile bootstrap drawn as multinomial outcome counts (numpy, seed 0, 2000
    # resamples) on 400 pairs: another generator's draws move the bounds by Monte Carlo error (about 0.005)
    expected = {"precision": (0.7156, 0.8762), "recall": (0.6435, 0.8113), "f1": (0.6947, 0.8220)}
    ours = bootstrap_intervals(*_example(10))
    for name, bounds in expected.items():
        assert ours[name] == pytest.approx(bounds, abs=0.015), name


def test_one_pair_resamples_to_itself():
    assert bootstrap_intervals([True], [True]) == {"precision": (1.0, 1.0), "recall": (1.0, 1.0), "f1": (1.0, 1.0)}
    assert bootstrap_intervals([False], [False]) == {"precision": None, "recall": None, "f1": None}


def test_undefined_metrics_have_no_interval():
    none_equivalent = bootstrap_intervals([False] * 5, [True, False, True, False, False])
    assert none_equivalent["recall"] is None and none_equivalent["precision"] == (0.0, 0.0)
    assert bootstrap_intervals([], [])["f1"] is None


def test_a_run_takes_exact_matches_and_never_unusable_or_gated_pairs():
    assert accepted_at(Verdict(True, None, "exact"), 0.99)
    assert not accepted_at(Verdict(False, 0.9, "unusable"), 0.5)
    assert not accepted_at(Verdict(False, None, "numbers"), 0.0)
    assert accepted_at(Verdict(False, 0.6, "embedding"), 0.6) and not accepted_at(Verdict(True, 0.6, "x"), 0.61)


# --- the study ----------------------------------------------------------------------------------------

# Dev wants 0.85 (0.6 lets the 0.7 negative in: precision 0.75); on test 0.65 would be best (all four
# equivalent pairs, no wrong one), so a threshold picked with test's help would differ.
DEV = [("d1", 0.9, True), ("d2", 0.85, True), ("d3", 0.7, False), ("d4", 0.6, True), ("d5", 0.5, False)]
TEST = [("t1", 0.95, True), ("t2", 0.82, True), ("t3", 0.7, True), ("t4", 0.65, True), ("t5", 0.3, False)]
SCORES = {d: s for d, s, _ in DEV + TEST}


def study_pairs():
    return ([pair(d, y, "dev", id=d) for d, _, y in DEV] + [pair(d, y, "test") for d, _, y in TEST])


def test_the_threshold_is_chosen_on_dev_and_judged_on_test(tmp_path):
    built = []

    def build(name):
        built.append(name)
        return Scripted(SCORES) if name == "llm-judge" else make_verifier(name)

    study = run_study(study_pairs(), tmp_path / "p.jsonl", ["llm-judge", "exact"], build, tmp_path, "dev", "test")
    test_pairs = [pair(d, y) for d, _, y in TEST]
    test_verdicts = [Verdict(True, s, "llm-judge") for _, s, _ in TEST]
    assert calibrate(test_pairs, test_verdicts, "test", 0.92).threshold == 0.65  # what test alone would pick
    default, chosen, exact = study.rows
    assert (chosen.threshold, chosen.source) == (0.85, "chosen on dev")
    assert (chosen.metrics.precision, chosen.metrics.recall, chosen.metrics.n) == (1.0, 0.25, 5)
    assert (default.threshold, default.source) == (DEFAULT_THRESHOLDS["llm-judge"], "default")
    assert default.metrics.recall == 0.5  # 0.8 takes t1 and t2
    assert (exact.source, exact.metrics.recall, exact.metrics.precision) == ("fixed", 0.0, None)
    assert study.calibrations["llm-judge"].n == 5 and study.calibrations["llm-judge"].precision == 1.0
    low, high = chosen.metrics.recall_ci
    assert low <= 0.25 <= high
    assert built == ["llm-judge", "exact"]


def test_a_rerun_asks_no_verifier_and_a_changed_pair_is_scored_again(tmp_path):
    scripted = Scripted(SCORES)
    first = write_study(study_pairs(), tmp_path / "p.jsonl", ["llm-judge"], lambda name: scripted, tmp_path,
                        "dev", "test")
    lines = (tmp_path / SCORES_FILE).read_text().splitlines()
    assert len(lines) == len(DEV) + len(TEST)
    assert {json.loads(l)["pair"] for l in lines} >= {"d1", "#6"}  # its id, else its line
    assert {"study.md", "study.json", "pr.png", SCORES_FILE} <= {p.name for p in tmp_path.iterdir()}

    def refuse(name):
        raise AssertionError("asked a verifier although every score was cached")

    again = write_study(study_pairs(), tmp_path / "p.jsonl", ["llm-judge"], refuse, tmp_path, "dev", "test")
    assert again.rows == first.rows
    changed = study_pairs()
    changed[-1] = changed[-1].model_copy(update={"step_a": "another target"})
    scripted.calls.clear()
    write_study(changed, tmp_path / "p.jsonl", ["llm-judge"], lambda name: scripted, tmp_path, "dev", "test")
    assert [len(asked) for _, asked in scripted.calls] == [1]


def test_gated_names_are_scored_over_their_base_verifiers_verdicts_asked_once(tmp_path):
    """A study of llm-judge and its gated names asks the judge once per pair; each gate rejects what it would
    in a run (a draft with a new number: the numbers gate; another result: the math gate)."""
    drafts = {"The total is 12.": 0.9, "The total is 13.": 0.9, "So x = 4.": 0.9, "So x = 5.": 0.9}
    pairs = [LabelledPair(step_a=a, step_b=d, equivalent=a == d.replace("13", "12"), split=split, id=f"p{i}",
                          context="We know 12 and 13.")
             for i, (a, d, split) in enumerate([("The total is 12.", "The total is 12.", "dev"),
                                                ("The total is 12.", "The total is 13.", "dev"),
                                                ("So x = 4.", "So x = 4.", "test"), ("So x = 4.", "So x = 5.", "test")])]
    scripted = Scripted(drafts)
    built = []

    def build(name):
        built.append(name)
        return scripted

    names = ["llm-judge", "llm-judge+numbers", "llm-judge+math", "llm-judge+numbers+math"]
    run_study(pairs, tmp_path / "p.jsonl", names, build, tmp_path, "dev", "test")
    assert built == ["llm-judge"]
    assert sum(len(asked) for _, asked in scripted.calls) == len(pairs)
    cached = [json.loads(line) for line in (tmp_path / SCORES_FILE).read_text().splitlines()]
    methods = {(r["verifier"], r["pair"]): r["method"] for r in cached}
    assert methods[("llm-judge+numbers", "p3")] == "numbers"  # 5 is new: the numbers gate
    assert methods[("llm-judge+math", "p3")] == "math" and methods[("llm-judge+math", "p1")] == "math"
    assert methods[("llm-judge+numbers", "p1")] == "llm-judge"  # 13 is in the context: the judge decides
    assert methods[("llm-judge+numbers+math", "p1")] == "math"


def test_study_files(tmp_path):
    write_study(study_pairs(), tmp_path / "p.jsonl", ["llm-judge", "random"], lambda n: Scripted(SCORES, n),
                tmp_path, "dev", "test")
    table = (tmp_path / "study.md").read_text()
    assert "| llm-judge | 0.850 | chosen on dev | 1.000 [1.000, 1.000] | 0.250 [" in table
    assert "| random | 0.500 | fixed |" in table
    saved = json.loads((tmp_path / "study.json").read_text())
    assert [r["source"] for r in saved["rows"]] == ["default", "chosen on dev", "fixed"]
    assert saved["curves"]["llm-judge"][0] == [1.0, 0.8]  # lowest test score: everything accepted
    assert (tmp_path / "pr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- the numbers gate ---------------------------------------------------------------------------------

EGGS = "Janet's ducks lay 16 eggs. She eats 3 and bakes with 4."


def test_the_gate_rejects_a_new_number_and_passes_a_shorter_restatement():
    assert new_numbers("16 - 3 - 4 = 9", "16 - 3 - 4 = 7", EGGS) == [7]
    assert new_numbers("16 - 3 - 4 = 9", "9 eggs remain") == []  # fewer numbers: fine
    assert new_numbers("9 eggs remain", "16 - 3 - 4 = 9", EGGS) == []  # the problem's numbers: fine
    assert new_numbers("9 eggs remain", "16 - 3 - 4 = 9") == [16, 3, 4]  # unless nobody wrote them
    assert new_numbers("1/4 of them", "0.25 of them, a loss of -2", "lost 2") == []  # values, sign ignored
    assert new_numbers("48/2 = 24", "48*2 = 96") == [96]  # 48/2 states 48 and 2 as well as 24
    assert new_numbers("10 * 11 / 2 = 55", "n(n+1)/2 with n = 10 gives 55") == [1]  # a constant of its own
    assert new_numbers("48/2 = 24", "half of 48 is 24") == [] and new_numbers("0.25", "1/4") == []


def test_the_gate_asks_its_verifier_about_the_rest_only():
    inner = Scripted({"9 eggs remain": 0.9, "so 9 are left": 0.2})
    gate = NumbersGate(inner)
    target = "16 - 3 - 4 = 9"
    verdicts = gate.verify(EGGS, [(target, "16 - 3 - 4 = 7"), (target, "9 eggs remain"), (target, "so 9 are left")])
    assert [(v.accept, v.method) for v in verdicts] == [(False, "numbers"), (True, "llm-judge"), (False, "llm-judge")]
    assert verdicts[0].score is None  # no threshold lets it through
    assert inner.calls == [(EGGS, [(target, "9 eggs remain"), (target, "so 9 are left")])]
    assert gate.name == "llm-judge+numbers"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=6), st.data())
def test_restating_fewer_numbers_never_trips_the_gate_and_a_new_one_always_does(values, data):
    target = " + ".join(map(str, values[:-1])) + f" = {values[-1]}"
    kept = data.draw(st.lists(st.sampled_from(values), max_size=len(values)))
    assert new_numbers(target, "so we get " + ", ".join(map(str, kept))) == []
    fresh = data.draw(st.integers(0, 10_000).filter(lambda v: v not in values))
    assert new_numbers(target, f"so we get {fresh}") == [fresh]
    assert new_numbers(target, f"so we get {fresh}", f"given {fresh} apples") == []


def test_gated_names_build_gated_verifiers_at_their_base_default():
    judge = make_verifier("llm-judge+numbers")  # no server needed: every pair below is decided before the judge
    assert isinstance(judge, FastPathVerifier) and isinstance(judge.inner, NumbersGate)
    verdicts = judge.verify(EGGS, [("16 - 3 - 4 = 9", "16 - 3 - 4 = 7"), ("A  b", "a b")])
    assert [(v.accept, v.method) for v in verdicts] == [(False, "numbers"), (True, "exact")]
    assert judge.inner.inner.threshold == DEFAULT_THRESHOLDS["llm-judge"]
    random_gate = make_verifier("random+numbers", 1.0)  # accepts whatever passes the gate
    assert [v.accept for v in random_gate.verify("", [("2", "3"), ("2", "2 apples")])] == [False, True]

    class Backend:
        model_info = {"model_path": "judge-model"}

    assert verifier_model("llm-judge+numbers", Backend()) == "judge-model"  # calibrations key on the judge
    for base in ("llm-judge", "embedding", "target-score", "random"):
        assert DEFAULT_THRESHOLDS[base + "+numbers"] == DEFAULT_THRESHOLDS[base]


def test_every_verifier_name_is_accepted_by_the_config_and_listed_in_the_help():
    allowed = set(get_args(LookaheadConfig.model_fields["verifier"].annotation))
    assert allowed == set(VERIFIER_NAMES)
    assert LookaheadConfig(verifier="llm-judge+numbers").verifier == "llm-judge+numbers"
    assert all(name in VERIFIERS for name in VERIFIER_NAMES)


# --- the commands -------------------------------------------------------------------------------------

CLI_PAIRS = [
    {"id": "1", "step_a": "16 - 3 - 4 = 9.", "step_b": "16 - 3 - 4 = 9.", "equivalent": True, "split": "dev"},
    {"id": "2", "step_a": "16 - 3 - 4 = 9.", "step_b": "16 - 3 - 4 = 7.", "equivalent": False, "split": "dev"},
    {"id": "3", "step_a": "48/2 = 24 clips.", "step_b": "Half of 48 is 24 clips.", "equivalent": True, "split": "dev"},
    {"id": "4", "step_a": "48/2 = 24 clips.", "step_b": "48*2 = 96 clips.", "equivalent": False, "split": "dev"},
    {"id": "5", "step_a": "The total is 72.", "step_b": "the total is 72.", "equivalent": True, "split": "test"},
    {"id": "6", "step_a": "The total is 72.", "step_b": "The total is 70.", "equivalent": False, "split": "test"},
    {"id": "7", "step_a": "So x = 5.", "step_b": "Hence x equals 5.", "equivalent": True, "split": "test"},
]


def test_evaluate_prints_intervals_and_keeps_a_split(tmp_path, capsys):
    pairs = write_pairs(tmp_path / "pairs.jsonl", CLI_PAIRS)
    done = invoke(capsys, "verifiers", "evaluate", "--pairs", str(pairs), "--verifier", "exact", "--split", "test",
                  "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["n"], result["precision"], result["recall"]) == (3, 1.0, 0.5)
    assert result["f1"] == pytest.approx(2 / 3) and result["recall_ci"][0] <= 0.5 <= result["recall_ci"][1]
    text = invoke(capsys, "verifiers", "evaluate", "--pairs", str(pairs), "--verifier", "exact")
    assert text.returncode == 0, text.stderr
    assert "precision 1.000 [1.000, 1.000], recall 0.500 [" in text.stdout and "n 7" in text.stdout
    one_line_error(invoke(capsys, "verifiers", "evaluate", "--pairs", str(pairs), "--verifier", "exact",
                          "--split", "train"), "no pair in")
    plain = write_pairs(tmp_path / "plain.jsonl", [{k: v for k, v in r.items() if k != "split"} for r in CLI_PAIRS])
    one_line_error(invoke(capsys, "verifiers", "calibrate", "--pairs", str(plain), "--verifier", "embedding",
                          "--split", "dev"), "has no split field")


def test_calibrate_on_a_split(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LOOKAHEAD_CALIBRATION", str(tmp_path / "cal.json"))
    pairs = write_pairs(tmp_path / "pairs.jsonl", CLI_PAIRS)
    done = invoke(capsys, "verifiers", "calibrate", "--pairs", str(pairs), "--verifier", "embedding-numbers",
                  "--split", "dev", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["n"] == 4 and result["pairs"] == f"{pairs} [dev]"
    one_line_error(invoke(capsys, "verifiers", "calibrate", "--pairs", str(pairs), "--verifier", "random+numbers"),
                   "no score to calibrate")


def test_study_command_writes_its_report_and_resumes(tmp_path, capsys, monkeypatch):
    pairs = write_pairs(tmp_path / "pairs.jsonl", CLI_PAIRS)
    out = tmp_path / "study"
    args = ["verifiers", "study", "--pairs", str(pairs), "--verifiers", "embedding-numbers,exact,random+numbers",
            "--out", str(out)]
    done = invoke(capsys, *args)
    assert done.returncode == 0, done.stderr
    assert "| embedding-numbers | 0.600 | default |" in done.stdout and "| exact | 1.000 | fixed |" in done.stdout
    saved = json.loads((out / "study.json").read_text())
    names = ["embedding-numbers", "embedding-numbers", "exact", "random+numbers"]
    assert [r["verifier"] for r in saved["rows"]] == names
    assert all(r["metrics"]["n"] == 3 for r in saved["rows"])
    # random+numbers puts its gate over random's own verdicts, which are cached too
    assert len((out / SCORES_FILE).read_text().splitlines()) == 4 * len(CLI_PAIRS)

    import lookahead_reasoning.verifiers.registry as registry

    monkeypatch.setattr(registry, "make_verifier", lambda *a, **k: pytest.fail("built a verifier on a rerun"))
    again = invoke(capsys, *args)
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "study.json").read_text()) == saved
    one_line_error(invoke(capsys, "verifiers", "study", "--pairs", str(pairs), "--out", str(out),
                          "--dev-split", "test"), "must differ")
    one_line_error(invoke(capsys, "verifiers", "study", "--pairs", str(pairs), "--out", str(out),
                          "--verifiers", "exact,oracle"), "unknown verifier 'oracle'")
