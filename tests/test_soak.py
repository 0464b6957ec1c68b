"""`lookahead bench soak`, briefly: `lookahead serve` and three simulated servers in processes of their
own, 16 clients for 25 s, a fault every 5 s and none in the last fault period. About 40 s on two cores."""

import json

from cli_invoke import invoke

from lookahead_reasoning.eval.soak_clients import Outcome
from lookahead_reasoning.eval.soak_report import _drafting_recovery
from lookahead_reasoning.eval.soak_stack import FAULTS, ROLES


def test_a_short_soak_loses_nothing_and_never_answers_500(capsys, tmp_path):
    outcome = invoke(capsys, "bench", "soak", "--duration", "25", "--clients", "16", "--fault-every", "5",
                     "--out", str(tmp_path))
    report = json.loads((tmp_path / "soak.json").read_text())
    requests = report["requests"]
    assert outcome.returncode == 0 and report["passed"], outcome.stdout + outcome.stderr
    assert requests["lost"] == 0 and "500" not in requests["errors"], report["lost"]
    assert not report["unexpected_statuses"] and not report["unshaped_errors"]
    # three faults: each role once, and both kinds
    assert {f["role"] for f in report["faults"]} == set(ROLES)
    assert {f["kind"] for f in report["faults"]} == set(FAULTS)
    # the mix reached the frontend: answers (some drafted), clients that left, hostile bodies. Whether an answer
    # was drafting when the draft or judge failed depends on the moment: the policy runs AR while a role is down
    assert requests["answered"] > 0 and requests["drafted"] > 0 and requests["left_on_purpose"] > 0
    assert requests["errors"].get("400", 0) > 0
    assert report["final_request"]["status"] == 200
    assert report["minutes"][0]["rss_mib"] > 0 and report["frontend"]["exit_code"] is None
    assert "answered (200)" in outcome.stdout and "passed: 0 lost, 0 × 500" in outcome.stdout
    assert (tmp_path / "serve.log").exists()


def _answers(drafted_per_minute: float, lo: float, hi: float) -> list[Outcome]:
    every = 60.0 / drafted_per_minute
    return [Outcome(end_s=lo + k * every, kind="lookahead", status="200", latency_s=1.0, drafted=True)
            for k in range(int((hi - lo) / every))]


def test_a_soak_fails_where_drafting_does_not_come_back_after_the_last_fault():
    faults = [{"t_s": 60.0}, {"t_s": 120.0}]  # the last one held 36 s: it ended at 156 s
    before = _answers(1000, 0.0, 60.0)
    stuck = _drafting_recovery(before + _answers(400, 171.0, 240.0), faults, 36.0, 240.0)
    assert stuck["back"] is False and stuck["before_faults_per_minute"] == 1000
    back = _drafting_recovery(before + _answers(900, 171.0, 240.0), faults, 36.0, 240.0)
    assert back["back"] is True
    assert _drafting_recovery(before, faults, 36.0, 180.0)["back"] is None  # 9 s after the settling: too short
