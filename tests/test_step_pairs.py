"""eval/step_pairs.py: judged pairs of real rounds with their contexts, appended per problem, resumable."""

import json

from scripted import PROMPT, ScriptedJudge, ScriptedModels

from lookahead_reasoning.eval.datasets import Problem
from lookahead_reasoning.eval.step_pairs import collect, done_problems
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.engine import SyncEngine

TARGET = ["s0 a", "s1 b", "s2 c", "s3 d \\boxed{1}"]
DRAFT = ["s0 a", "x1 b", "wrong", "s3 d \\boxed{1}"]


def runner(asked: list[str]):
    def run(message, on_round):
        asked.append(message)
        config = LookaheadConfig(depth=2, fork="batched")
        return SyncEngine(config, ScriptedModels(TARGET, DRAFT), ScriptedJudge({"a", "b"}), on_round=on_round).answer(message)
    return run


def problems(n):
    return [Problem(id=f"p{i}", message=f"question {i}", grader="none") for i in range(n)]


def test_every_judged_pair_is_written_with_the_reasoning_before_its_position(tmp_path):
    out = tmp_path / "pairs.jsonl"
    assert collect(problems(1), runner([]), out, "toy:inline") == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["round"], r["position"]) for r in rows] == [(0, 1), (0, 2), (1, 1)]  # round 1 drafts one step: it ends on EOS
    first, second = rows[0], rows[1]
    assert (first["context"], first["step_a"], first["step_b"]) == ("", "s0 a\n\n", "s0 a\n\n")
    # position 2 follows the draft's first step, and is compared with the target's step after it
    assert (second["context"], second["step_a"], second["step_b"]) == ("s0 a\n\n", "s1 b\n\n", "x1 b\n\n")
    assert second["verifier_accept"] is True  # the scripted judge accepts "b"
    # round 1 starts after what round 0 kept: s0 a, x1 b (accepted), then the target's s2 c after them
    assert rows[2]["context"] == "s0 a\n\nx1 b\n\ns2 c\n\n" and rows[2]["step_b"] == "s3 d \\boxed{1}"
    assert {r["problem"] for r in rows} == {"p0"} and rows[0]["source"] == "toy:inline"
    assert rows[0]["id"] == "p0-r0-p1" and rows[0]["question"] == "question 0"
    assert PROMPT not in "".join(r["context"] for r in rows)


def test_a_rerun_skips_the_problems_already_collected(tmp_path):
    out, asked = tmp_path / "pairs.jsonl", []
    collect(problems(2), runner(asked), out, "toy:inline")
    collect(problems(3), runner(asked), out, "toy:inline")
    assert asked == ["question 0", "question 1", "question 2"]
    assert done_problems(out) == {"p0", "p1", "p2"}
    assert len(out.read_text().splitlines()) == 9


def test_the_labelled_set_in_the_project_is_well_formed():
    """data/step_pairs.jsonl: loadable as a study's pairs, both splits, no problem in both, labels explained."""
    from pathlib import Path

    from lookahead_reasoning.eval.verifier_study import load_pairs

    path = Path(__file__).resolve().parents[1] / "data" / "step_pairs.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(load_pairs(path)) == len(rows) and len({r["id"] for r in rows}) == len(rows)
    splits = {split: {r["problem"] for r in rows if r["split"] == split} for split in ("dev", "test")}
    assert splits["dev"] and splits["test"] and not splits["dev"] & splits["test"]
    for r in rows:
        assert " ".join(r["step_a"].lower().split()) != " ".join(r["step_b"].lower().split())  # not trivially equal
        first, second = r["readings"]
        assert r["agreement"] == ("agreed" if first == second else "resolved")
        assert first != second or r["equivalent"] == first
        assert r["note"].strip() and r["context"] is not None and r["question"].strip()
