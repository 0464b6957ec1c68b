"""Step pairs from real lookahead rounds: the raw material of a labelled verifier set.

Each judged pair of a round becomes one JSON line: the problem, the reasoning before
the pair's position (the run so far, then the draft steps before it in the window),
the target's step there (`step_a`), the draft's (`step_b`) and what the verifier of
the run said. Labels are added later, by reading (docs/evaluation.md has the guide).

Lines are written as each problem finishes, and the problem's id into `<file>.done`; a
rerun skips the problems listed there, so an interrupted collection resumes where it stopped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from lookahead_reasoning.eval.datasets import Problem
from lookahead_reasoning.runtime.results import RoundRecord


def round_pairs(record: RoundRecord, before: str) -> list[dict]:
    """The judged pairs of one chain round (W = 1), each with the reasoning that precedes its position."""
    pairs, context = [], before
    for position, judged in enumerate(record.judged, start=1):
        pairs.append({
            "round": record.index, "position": position, "context": context,
            "step_a": judged.target, "step_b": judged.draft,
            "verifier_accept": judged.accept, "verifier_score": judged.score, "verifier_method": judged.method,
        })
        context += judged.draft  # the next position's prefix holds this draft step
    return pairs


def done_file(path: Path) -> Path:
    return path.with_name(path.name + ".done")


def done_problems(path: Path) -> set[str]:
    """Problems already collected into the pairs file at `path` (those that gave no pair included)."""
    done = done_file(path)
    return set(done.read_text(encoding="utf-8").split()) if done.exists() else set()


def collect(
    problems: list[Problem], run: Callable[[str, Callable[[RoundRecord], None]], object], path: Path,
    source: str, on_problem: Callable[[Problem, int], None] | None = None,
) -> int:
    """Run every problem not yet in `path` with `run(message, on_round)` and append its pairs; returns how
    many pairs were written. `source` names the dataset file, kept on every line as provenance."""
    done = done_problems(path)
    written = 0
    for problem in problems:
        if problem.id in done:
            continue
        rows: list[dict] = []
        text = ""

        def on_round(record: RoundRecord) -> None:
            nonlocal text
            if record.width == 1:
                rows.extend(round_pairs(record, text))
            text += "".join(step.text for step in record.kept)

        run(problem.message, on_round)
        lines = [{"id": f"{problem.id}-r{row['round']}-p{row['position']}", "problem": problem.id,
                  "question": problem.message, "source": source, **row} for row in rows]
        with path.open("a", encoding="utf-8") as out:
            for line in lines:
                out.write(json.dumps(line) + "\n")
        with done_file(path).open("a", encoding="utf-8") as out:
            out.write(problem.id + "\n")
        written += len(rows)
        if on_problem is not None:
            on_problem(problem, len(rows))
    return written
