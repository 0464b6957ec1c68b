"""Benchmark specs: records become problems, bad files give errors with file and line."""

import json

import pytest

from conftest import SHARED_DATA
from lookahead_reasoning.eval.datasets import SPECS, load_problems, read_jsonl
from lookahead_reasoning.errors import LookaheadError


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_gsm8k_local_and_hub_forms(tmp_path):
    data = write(tmp_path / "g.jsonl", [
        {"id": "gsm8k-0000", "question": "2+2?", "answer": "4"},
        {"question": "How many?", "answer": "Work <<1+1=2>>.\n#### 1,200"},  # the hub's form
    ])
    first, second = load_problems("gsm8k", data)
    assert first.id == "gsm8k-0000" and first.reference == "4" and first.grader == "number"
    assert "\\boxed{}" in first.message and first.message.startswith("2+2?")
    assert second.id == "gsm8k-0001" and second.reference == "1200"
    assert len(load_problems("gsm8k", data, limit=1)) == 1


def test_gpqa_lists_the_choices(tmp_path):
    data = write(tmp_path / "q.jsonl", [{"id": "gpqa-0", "question": "Which?", "choices": ["w", "x", "y", "z"], "answer": "C"}])
    (problem,) = load_problems("gpqa_diamond", data)
    assert "A) w\nB) x\nC) y\nD) z" in problem.message and problem.reference == "C" and problem.grader == "choice"


def test_code_and_chat_specs(tmp_path):
    he = write(tmp_path / "he.jsonl", [{"task_id": "HumanEval/0", "prompt": "def f():\n", "test": "def check(c): pass",
                                        "entry_point": "f", "canonical_solution": "    return 1\n"}])
    (problem,) = load_problems("humaneval", he)
    assert problem.grader == "code" and problem.extra["entry_point"] == "f" and "def f():" in problem.message
    lcb = write(tmp_path / "lcb.jsonl", [{"id": "lcb-0000", "question": "Sum two numbers.", "starter_code": ""}])
    assert load_problems("livecodebench", lcb)[0].grader == "none"
    assert "no tests" in SPECS["livecodebench"].note
    mt = write(tmp_path / "mt.jsonl", [{"question_id": 81, "category": "writing", "turns": ["Write.", "Again."]}])
    (problem,) = load_problems("mt_bench", mt)
    assert problem.id == "81" and problem.message == "Write." and problem.grader == "judge-score"


def test_bad_input_names_the_file_and_line(tmp_path):
    with pytest.raises(LookaheadError, match="unknown dataset 'gsm9k'"):
        load_problems("gsm9k", tmp_path / "x.jsonl")
    with pytest.raises(LookaheadError, match="does not exist"):
        load_problems("gsm8k", tmp_path / "missing.jsonl")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "a", "answer": "1"}\n{"question": "b", "answer": \n')
    with pytest.raises(LookaheadError, match=r"broken.jsonl:2: not valid JSON"):
        load_problems("gsm8k", broken)
    lacking = write(tmp_path / "lacking.jsonl", [{"question": "a", "answer": "1"}, {"question": "b"}])
    with pytest.raises(LookaheadError, match=r"lacking.jsonl:2: record lacks the field\(s\) answer"):
        load_problems("gsm8k", lacking)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(LookaheadError, match="holds no records"):
        read_jsonl(tmp_path / "empty.jsonl", ("answer",))
    duplicate = write(tmp_path / "dup.jsonl", [{"id": "a", "question": "x", "answer": "1"}] * 2)
    with pytest.raises(LookaheadError, match="not unique"):
        load_problems("gsm8k", duplicate)


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs ../shared/data (the offline benchmark copies)")
@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_shared_file_loads(name):
    problems = load_problems(name, SHARED_DATA / SPECS[name].local_file)
    assert len(problems) >= 10
    assert all(p.message.strip() for p in problems)
    if SPECS[name].to_problem.__name__ not in ("_humaneval", "_livecodebench", "_mt_bench"):
        assert all(p.reference for p in problems)
