"""Eval, the scoring programs and the model-backed verifiers against real SGLang CPU servers (tiny models).

tiny (target, judge) always answers "We add two and three\\n\\nHence \\boxed{5}"; tiny-draft
ends with \\boxed{6} instead.
"""

import json
import os
import subprocess
import sys

import pytest

from lookahead_reasoning.programs.backend import LookaheadEndpoint
from lookahead_reasoning.programs.roles import score_answer_on
from lookahead_reasoning.runtime.servers.endpoints import save_endpoints
from lookahead_reasoning.verifiers.registry import make_verifier

pytestmark = pytest.mark.server


def cli(*args, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LOOKAHEAD_CALIBRATION": str(tmp_path / "cal.json")}
    return subprocess.run([sys.executable, "-m", "lookahead_reasoning.cli", *args],
                          capture_output=True, text=True, env=env, timeout=600)


def test_eval_grades_each_method_on_real_servers(tiny_endpoints, tmp_path):
    endpoints = tmp_path / "endpoints.json"
    save_endpoints(tiny_endpoints, endpoints)
    data = tmp_path / "gsm.jsonl"
    data.write_text(json.dumps({"id": "five", "question": "What is two and three?", "answer": "5"}) + "\n"
                    + json.dumps({"id": "six", "question": "What is two and four?", "answer": "6"}) + "\n")
    out = tmp_path / "out"
    done = cli("eval", "--dataset", "gsm8k", "--data", str(data), "--methods", "ar,lr,draft", "--verifier", "exact",
               "--depth", "2", "--max-tokens", "64", "--endpoints", str(endpoints), "--out", str(out), tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    records = {(r["problem_id"], r["method"]): r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert len(records) == 6
    for method, right in (("ar", "five"), ("lr", "five"), ("draft", "six")):
        for pid in ("five", "six"):
            assert records[(pid, method)]["correct"] is (pid == right), (pid, method)
    assert records[("five", "lr")]["text"] == records[("five", "ar")]["text"]  # exact verification is lossless
    assert records[("five", "lr")]["draft_steps_judged"] >= 1
    report = json.loads((out / "report.json").read_text())
    accuracy = {m["method"]: m["accuracy"] for m in report["methods"]}
    assert accuracy == {"ar": 0.5, "lr": 0.5, "draft": 0.5}
    assert "verifier exact, threshold 1.000 (default)" in report["notes"][0]


def test_judge_scores_an_answer_within_1_to_10(tiny_endpoints):
    backend = LookaheadEndpoint(tiny_endpoints.judge.url)
    score = score_answer_on(backend, "What is two and three?", "Hence \\boxed{5}", reference="5")
    assert score.text in {str(n) for n in range(1, 11)}
    assert 1 <= score.value <= 10 and score.prompt_tokens > 20


def test_target_score_and_llm_judge_verifiers(tiny_endpoints, tmp_path):
    backend = LookaheadEndpoint(tiny_endpoints.target.url)
    verifier = make_verifier("target-score", 0.5, target_backend=backend, fast_path=False)
    verdicts = verifier.verify("Q: two and three?\n", [("We add two and three", "We add 2 and 3"), ("a", "b")])
    assert len(verdicts) == 2
    assert all(verdict.method in ("target-score", "unusable") for verdict in verdicts)
    scored = [verdict for verdict in verdicts if verdict.method == "target-score"]
    assert scored, verdicts  # the checks below must not pass by having nothing to check
    for verdict in scored:
        assert 0.0 <= verdict.score <= 1.0 and verdict.accept == (verdict.score >= 0.5)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"step_a": "2 + 3 = 5", "step_b": "two plus three is 5", "equivalent": True}) + "\n"
                     + json.dumps({"step_a": "2 + 3 = 5", "step_b": "2 + 3 = 6", "equivalent": False}) + "\n")
    done = cli("verifiers", "evaluate", "--pairs", str(pairs), "--verifier", "llm-judge", "--judge-url",
               tiny_endpoints.judge.url, "--threshold", "0.5", "--json", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n"] == 2 and json.loads(done.stdout)["threshold"] == 0.5
    scored = cli("verifiers", "evaluate", "--pairs", str(pairs), "--verifier", "target-score", "--target-url",
                 tiny_endpoints.target.url, "--json", tmp_path=tmp_path)
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout)["threshold"] == pytest.approx(7 / 9)


def test_mt_bench_answers_are_scored_by_the_judge(tiny_endpoints, tmp_path):
    endpoints = tmp_path / "endpoints.json"
    save_endpoints(tiny_endpoints, endpoints)
    data = tmp_path / "mt.jsonl"
    data.write_text(json.dumps({"question_id": 81, "category": "math", "turns": ["What is two and three?", "And four?"],
                                "reference": ["5", "9"]}) + "\n")
    out = tmp_path / "out"
    done = cli("eval", "--dataset", "mt_bench", "--data", str(data), "--methods", "ar", "--max-tokens", "32",
               "--endpoints", str(endpoints), "--out", str(out), tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    (record,) = map(json.loads, (out / "results.jsonl").read_text().splitlines())
    assert record["correct"] is None and 1 <= record["score"] <= 10 and record["reference"] == "5"
    (summary,) = json.loads((out / "report.json").read_text())["methods"]
    assert summary["mean_score"] == record["score"] and summary["accuracy"] is None
