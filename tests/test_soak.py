"""`lookahead bench --soak`, briefly: `lookahead serve` and three simulated servers in processes of their
own, 16 clients for 20 s, a fault every 5 s. About 35 s on two cores."""

import json

from cli_invoke import invoke

from lookahead_reasoning.eval.soak import FAULTS, ROLES


def test_a_short_soak_loses_nothing_and_never_answers_500(capsys, tmp_path):
    outcome = invoke(capsys, "bench", "--soak", "--duration", "20", "--clients", "16", "--fault-every", "5",
                     "--out", str(tmp_path))
    report = json.loads((tmp_path / "soak.json").read_text())
    requests = report["requests"]
    assert outcome.returncode == 0 and report["passed"], outcome.stdout + outcome.stderr
    assert requests["lost"] == 0 and "500" not in requests["errors"], report["lost"]
    assert not report["unexpected_statuses"] and not report["unshaped_errors"]
    # three faults: each role once, and both kinds
    assert {f["role"] for f in report["faults"]} == set(ROLES)
    assert {f["kind"] for f in report["faults"]} == set(FAULTS)
    # the mix reached the frontend: answers (some degraded by the faults), clients that left, hostile bodies
    assert requests["answered"] > 0 and requests["degraded"] > 0 and requests["left_on_purpose"] > 0
    assert requests["errors"].get("400", 0) > 0
    assert report["final_request"]["status"] == 200
    assert report["minutes"][0]["rss_mib"] > 0 and report["frontend"]["exit_code"] is None
    assert "answered (200)" in outcome.stdout and "passed: 0 lost, 0 × 500" in outcome.stdout
    assert (tmp_path / "serve.log").exists()
