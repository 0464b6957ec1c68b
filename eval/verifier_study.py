"""Verifiers on labelled step pairs: precision, recall, F1 with bootstrap intervals, and a calibrated threshold.

A pair file holds JSON lines `{"step_a", "step_b", "equivalent"}`, optionally with `id`,
`context` (the reasoning before the step) and `split` ("dev", "test", ...); other fields are
ignored. step_a plays the target's step and step_b the draft's. "Positive" means
"equivalent": precision is the share of accepted pairs that were truly equivalent (what
protects the answer), recall the share of equivalent pairs accepted (what buys speed).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import scipy.stats
from pydantic import BaseModel

from lookahead_reasoning.eval.datasets import read_jsonl
from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.verifiers.base import Verdict, Verifier
from lookahead_reasoning.verifiers.calibration import Calibration

BATCH = 8  # pairs per verifier call (one fork on an LLM judge)
Interval = tuple[float, float]


class LabelledPair(BaseModel):
    step_a: str
    step_b: str
    equivalent: bool
    context: str = ""  # what both steps follow: the verifier's `context`
    id: str | None = None
    split: str | None = None


class Metrics(BaseModel):
    precision: float | None  # None when nothing was accepted
    recall: float | None  # None when nothing is equivalent
    f1: float | None  # None when there is neither an accepted nor an equivalent pair
    accuracy: float
    threshold: float | None
    n: int
    precision_ci: Interval | None = None  # 95 % percentile bootstrap over pairs, when asked for
    recall_ci: Interval | None = None
    f1_ci: Interval | None = None


def _optional_text(record: dict, key: str, where: str) -> str | None:
    value = record.get(key)
    if value is None or isinstance(value, str):
        return value
    if key == "id" and isinstance(value, int):
        return str(value)
    raise LookaheadError(f"{where}: {key} must be a string")


def load_pairs(path: Path) -> list[LabelledPair]:
    records = read_jsonl(path, ("step_a", "step_b"), what="pairs file")
    pairs, seen = [], {}
    for number, record in enumerate(records, 1):
        where = f"{path}: pair {number}"
        if not isinstance(record.get("equivalent"), bool):
            raise LookaheadError(f"{where}: equivalent must be true or false")
        pair = LabelledPair(step_a=str(record["step_a"]), step_b=str(record["step_b"]), equivalent=record["equivalent"],
                            context=_optional_text(record, "context", where) or "",
                            id=_optional_text(record, "id", where), split=_optional_text(record, "split", where))
        if pair.id is not None and seen.setdefault(pair.id, number) != number:
            raise LookaheadError(f"{where}: id {pair.id!r} repeats pair {seen[pair.id]}'s")
        pairs.append(pair)
    return pairs


def select_split(pairs: list[LabelledPair], split: str | None, path: Path) -> list[LabelledPair]:
    """The pairs of `split` (all when None); an error when the file has no splits or none match."""
    if split is None:
        return pairs
    splits = sorted({p.split for p in pairs if p.split is not None})
    if not splits:
        raise LookaheadError(f"{path} has no split field; --split needs one on its pairs")
    chosen = [p for p in pairs if p.split == split]
    if not chosen:
        raise LookaheadError(f"no pair in {path} has split {split!r}; its splits: {', '.join(splits)}")
    return chosen


def context_batches(pairs: list[LabelledPair]) -> Iterator[tuple[int, int]]:
    """(start, end) of runs of consecutive pairs with one context, at most BATCH long: one verifier call each."""
    start = 0
    while start < len(pairs):
        end = start + 1
        while end < len(pairs) and end - start < BATCH and pairs[end].context == pairs[start].context:
            end += 1
        yield start, end
        start = end


def judge_all(verifier: Verifier, pairs: list[LabelledPair],
              on_batch: Callable[[int, list[Verdict]], None] | None = None) -> list[Verdict]:
    """One verdict per pair; `on_batch(start, verdicts)` after each call, so a caller can save as it goes."""
    verdicts: list[Verdict] = []
    for start, end in context_batches(pairs):
        batch = pairs[start:end]
        decided = verifier.verify(batch[0].context, [(p.step_a, p.step_b) for p in batch])
        if on_batch:
            on_batch(start, decided)
        verdicts += decided
    return verdicts


def accepted_at(verdict: Verdict, threshold: float) -> bool:
    """What a run at `threshold` would do with this verdict: exact matches always pass, unusable answers
    and pairs the numbers gate rejected never do."""
    if verdict.method == "exact":
        return True
    return verdict.method != "unusable" and verdict.score is not None and verdict.score >= threshold


def _counts(labels, accepted) -> tuple[int, int, int, int]:
    tp = sum(a and y for a, y in zip(accepted, labels))
    fp = sum(a and not y for a, y in zip(accepted, labels))
    fn = sum(not a and y for a, y in zip(accepted, labels))
    return tp, fp, fn, len(labels) - tp - fp - fn


def metrics(labels: list[bool], accepted: list[bool], threshold: float | None, intervals: bool = False) -> Metrics:
    tp, fp, fn, tn = _counts(labels, accepted)
    result = Metrics(
        precision=tp / (tp + fp) if tp + fp else None,
        recall=tp / (tp + fn) if tp + fn else None,
        f1=2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None,
        accuracy=(tp + tn) / len(labels),
        threshold=threshold,
        n=len(labels),
    )
    if intervals:
        result = result.model_copy(update={f"{k}_ci": v for k, v in bootstrap_intervals(labels, accepted).items()})
    return result


def bootstrap_intervals(labels: list[bool], accepted: list[bool], resamples: int = 2000,
                        seed: int = 0) -> dict[str, Interval | None]:
    """95 % percentile-bootstrap intervals of precision, recall and F1, resampling pairs with replacement.

    A resample where a metric is undefined is left out of that metric's interval; None when no resample
    defines it.
    """
    names = ("precision", "recall", "f1")
    if len(labels) < 2:  # scipy asks for two pairs; one pair resamples only to itself
        point = metrics(labels, accepted, None).model_dump() if labels else {}
        return {k: None if point.get(k) is None else (point[k], point[k]) for k in names}
    with warnings.catch_warnings():
        # scipy's own interval is NaN where some resample leaves a metric undefined; it is taken below instead
        warnings.simplefilter("ignore", scipy.stats.DegenerateDataWarning)
        result = scipy.stats.bootstrap((np.array(labels, dtype=bool), np.array(accepted, dtype=bool)), _rates,
                                       paired=True, vectorized=True, n_resamples=resamples, method="percentile",
                                       rng=np.random.default_rng(seed))
    # the same percentiles as scipy's interval, over the resamples that define each metric
    bounds = scipy.stats.quantile(result.bootstrap_distribution, np.array([0.025, 0.975]), axis=-1,
                                  nan_policy="omit")
    return {k: None if np.isnan(low) else (float(low), float(high)) for k, (low, high) in zip(names, bounds)}


def _rates(labels: np.ndarray, accepted: np.ndarray, axis: int = -1) -> np.ndarray:
    """Precision, recall and F1 of each resample (NaN where undefined)."""
    tp = (labels & accepted).sum(axis=axis)
    fp = (~labels & accepted).sum(axis=axis)
    fn = (labels & ~accepted).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.stack([tp / (tp + fp), tp / (tp + fn), 2 * tp / (2 * tp + fp + fn)])


def evaluate(verifier: Verifier, pairs: list[LabelledPair], threshold: float | None) -> Metrics:
    verdicts = judge_all(verifier, pairs)
    return metrics([p.equivalent for p in pairs], [v.accept for v in verdicts], threshold, intervals=True)


def calibrate(
    pairs: list[LabelledPair], verdicts: list[Verdict], source: str, min_precision: float = 0.9
) -> Calibration:
    """The threshold on the verdicts' scores with the best accuracy among those with precision >= min_precision.

    Ties go to the higher recall, then to the lower threshold. When no threshold reaches
    min_precision, the most precise one is kept and `met_precision` says so. Pairs count as
    a run would take them (`accepted_at`).
    """
    labels = [p.equivalent for p in pairs]
    candidates = sorted({v.score for v in verdicts if v.score is not None} | {1.0})
    rows = [(t, metrics(labels, [accepted_at(v, t) for v in verdicts], t)) for t in candidates]
    meeting = [(t, m) for t, m in rows if m.precision is not None and m.precision >= min_precision]
    if meeting:
        t, best = max(meeting, key=lambda tm: (tm[1].accuracy, tm[1].recall or 0.0, -tm[0]))
    else:
        t, best = max(rows, key=lambda tm: (tm[1].precision or 0.0, tm[1].accuracy, -tm[0]))
    return Calibration(
        threshold=t, precision=best.precision, recall=best.recall, accuracy=best.accuracy, n=best.n,
        min_precision=min_precision, met_precision=bool(meeting), pairs=source,
    )
