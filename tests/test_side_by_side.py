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
    assert capsys.readouterr().out.count("problem ") == 1


def test_a_method_must_name_its_engine_and_depth():
    with pytest.raises(SystemExit, match="ENGINE-DEPTH"):
        _script().method_config("fast", 100)
