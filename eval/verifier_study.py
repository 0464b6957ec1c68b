"""Verifiers on a labelled set of step pairs: precision, recall, accuracy, and a calibrated threshold.

A pair file holds JSON lines `{"step_a", "step_b", "equivalent"}`. step_a plays the
target's step and step_b the draft's. "Positive" means "equivalent": precision is the
share of accepted pairs that were truly equivalent (what protects the answer), recall
the share of equivalent pairs accepted (what buys speed).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from lookahead_reasoning.eval.datasets import read_jsonl
from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.verifiers.base import Verdict, Verifier
from lookahead_reasoning.verifiers.calibration import Calibration

BATCH = 8  # pairs per verifier call (one fork on an LLM judge)


class LabelledPair(BaseModel):
    step_a: str
    step_b: str
    equivalent: bool


class Metrics(BaseModel):
    precision: float | None  # None when nothing was accepted
    recall: float | None  # None when nothing is equivalent
    accuracy: float
    threshold: float | None
    n: int


def load_pairs(path: Path) -> list[LabelledPair]:
    records = read_jsonl(path, ("step_a", "step_b"), what="pairs file")
    pairs = []
    for number, record in enumerate(records, 1):
        if not isinstance(record.get("equivalent"), bool):
            raise LookaheadError(f"{path}: pair {number}: equivalent must be true or false")
        pairs.append(LabelledPair(step_a=str(record["step_a"]), step_b=str(record["step_b"]),
                                  equivalent=record["equivalent"]))
    return pairs


def judge_all(verifier: Verifier, pairs: list[LabelledPair]) -> list[Verdict]:
    verdicts: list[Verdict] = []
    for start in range(0, len(pairs), BATCH):
        batch = pairs[start:start + BATCH]
        verdicts += verifier.verify("", [(p.step_a, p.step_b) for p in batch])
    return verdicts


def metrics(labels: list[bool], accepted: list[bool], threshold: float | None) -> Metrics:
    tp = sum(a and y for a, y in zip(accepted, labels))
    fp = sum(a and not y for a, y in zip(accepted, labels))
    fn = sum(not a and y for a, y in zip(accepted, labels))
    correct = sum(a == y for a, y in zip(accepted, labels))
    return Metrics(
        precision=tp / (tp + fp) if tp + fp else None,
        recall=tp / (tp + fn) if tp + fn else None,
        accuracy=correct / len(labels),
        threshold=threshold,
        n=len(labels),
    )


def evaluate(verifier: Verifier, pairs: list[LabelledPair], threshold: float | None) -> Metrics:
    verdicts = judge_all(verifier, pairs)
    return metrics([p.equivalent for p in pairs], [v.accept for v in verdicts], threshold)


def calibrate(
    pairs: list[LabelledPair], verdicts: list[Verdict], source: str, min_precision: float = 0.9
) -> Calibration:
    """The threshold on the verdicts' scores with the best accuracy among those with precision >= min_precision.

    Ties go to the higher recall, then to the lower threshold. When no threshold reaches
    min_precision, the most precise one is kept and `met_precision` says so.
    Exact matches (method "exact") are accepted at any threshold, as at run time.
    """
    labels = [p.equivalent for p in pairs]
    scores = [v.score for v in verdicts]
    exact = [v.method == "exact" for v in verdicts]
    candidates = sorted({s for s in scores if s is not None} | {1.0})
    rows = []
    for t in candidates:
        accepted = [e or (s is not None and s >= t) for s, e in zip(scores, exact)]
        rows.append((t, metrics(labels, accepted, t)))
    meeting = [(t, m) for t, m in rows if m.precision is not None and m.precision >= min_precision]
    if meeting:
        t, best = max(meeting, key=lambda tm: (tm[1].accuracy, tm[1].recall or 0.0, -tm[0]))
    else:
        t, best = max(rows, key=lambda tm: (tm[1].precision or 0.0, tm[1].accuracy, -tm[0]))
    return Calibration(
        threshold=t, precision=best.precision, recall=best.recall, accuracy=best.accuracy, n=best.n,
        min_precision=min_precision, met_precision=bool(meeting), pairs=source,
    )
