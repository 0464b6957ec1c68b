"""A verifier study: each threshold chosen on the dev split, judged on the test split with bootstrap intervals.

Every pair is scored once per verifier (a gated name's gates over its base verifier's verdicts, so
that the base is asked once for all its gated names); the scores go to `scores.jsonl` in the study's folder as
they come, so a rerun (after an interruption, or with more verifiers) asks no server about a
pair it already scored. A cached score counts only while its pair's text is unchanged.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from lookahead_reasoning.eval.verifier_study import (
    LabelledPair, Metrics, accepted_at, calibrate, judge_all, metrics, select_split,
)
from lookahead_reasoning.verifiers.base import Verdict, Verifier
from lookahead_reasoning.verifiers.calibration import Calibration
from lookahead_reasoning.verifiers.registry import DEFAULT_THRESHOLDS, GATES, base_verifier, gates_of, has_score

SCORES_FILE = "scores.jsonl"


class StudyRow(BaseModel):
    verifier: str
    threshold: float
    source: str  # "default", "chosen on dev" or "fixed" (a verifier without a score)
    metrics: Metrics  # on the test split


class Study(BaseModel):
    pairs: str
    dev_split: str
    test_split: str
    min_precision: float
    rows: list[StudyRow]
    calibrations: dict[str, Calibration]  # per scored verifier, on the dev split
    curves: dict[str, list[tuple[float, float]]]  # per scored verifier, (recall, precision) on test by threshold


def keyed(pairs: list[LabelledPair]) -> list[LabelledPair]:
    """The pairs with an id each: their own, else "#<line>", the key of their cached scores."""
    return [p if p.id is not None else p.model_copy(update={"id": f"#{i}"}) for i, p in enumerate(pairs, 1)]


def _digest(pair: LabelledPair) -> str:
    return hashlib.sha256(json.dumps([pair.context, pair.step_a, pair.step_b]).encode()).hexdigest()[:16]


class ScoreCache:
    """The verdicts of scores.jsonl by (verifier, pair id); lines are appended as verdicts arrive."""

    def __init__(self, path: Path):
        self.path = path
        self.verdicts: dict[tuple[str, str, str], Verdict] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                self._load(line)

    def _load(self, line: str) -> None:
        try:
            r = json.loads(line)
            self.verdicts[(r["verifier"], r["pair"], r["digest"])] = Verdict(bool(r["accept"]), r["score"], r["method"])
        except (json.JSONDecodeError, KeyError, TypeError):
            pass  # a line cut short by an interruption: that pair is scored again

    def get(self, verifier: str, pair: LabelledPair) -> Verdict | None:
        return self.verdicts.get((verifier, pair.id, _digest(pair)))

    def add(self, verifier: str, pairs: list[LabelledPair], verdicts: list[Verdict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            for pair, v in zip(pairs, verdicts):
                self.verdicts[(verifier, pair.id, _digest(pair))] = v
                out.write(json.dumps({"verifier": verifier, "pair": pair.id, "digest": _digest(pair),
                                      "score": v.score, "method": v.method, "accept": v.accept}) + "\n")


def scored(name: str, pairs: list[LabelledPair], cache: ScoreCache, build: Callable[[str], Verifier]) -> list[Verdict]:
    """The verdicts of `name` on `pairs`; only pairs missing from the cache are judged (and `build` called). A
    gated name (NAME+numbers, ...) puts its gates over NAME's verdicts, so NAME is asked once per pair for all."""
    missing = [p for p in pairs if cache.get(name, p) is None]
    if missing:
        verifier = _gated(name, missing, cache, build) if gates_of(name) else build(name)
        judge_all(verifier, missing,
                  lambda start, verdicts: cache.add(name, missing[start:start + len(verdicts)], verdicts))
    return [cache.get(name, p) for p in pairs]


class _Scored:
    """A verifier that answers with verdicts already scored: the inner verifier of a gated name in a study."""

    def __init__(self, name: str, pairs: list[LabelledPair], verdicts: list[Verdict]):
        self.name = name
        self._verdicts = {(p.context, p.step_a, p.step_b): v for p, v in zip(pairs, verdicts)}

    def verify(self, context: str | None, pairs: list[tuple[str, str]]) -> list[Verdict]:
        return [self._verdicts[(context, a, b)] for a, b in pairs]


def _gated(name: str, pairs: list[LabelledPair], cache: ScoreCache, build: Callable[[str], Verifier]) -> Verifier:
    """`name`'s gates, in registry order, over its base verifier's verdicts on `pairs` (scored first)."""
    base = base_verifier(name)
    verifier: Verifier = _Scored(base, pairs, scored(base, pairs, cache, build))
    for gate in gates_of(name):
        verifier = GATES[gate](verifier)
    return verifier


def curve(labels: list[bool], verdicts: list[Verdict]) -> list[tuple[float, float]]:
    """(recall, precision) at each threshold a score offers, where precision is defined."""
    points = []
    for t in sorted({v.score for v in verdicts if v.score is not None}):
        m = metrics(labels, [accepted_at(v, t) for v in verdicts], t)
        if m.precision is not None and m.recall is not None:
            points.append((m.recall, m.precision))
    return points


def _row(name: str, threshold: float, source: str, test: list[LabelledPair], accepted: list[bool]) -> StudyRow:
    labels = [p.equivalent for p in test]
    return StudyRow(verifier=name, threshold=threshold, source=source,
                    metrics=metrics(labels, accepted, threshold, intervals=True))


def run_study(pairs: list[LabelledPair], path: Path, names: list[str], build: Callable[[str], Verifier], out: Path,
              dev_split: str, test_split: str, min_precision: float = 0.92) -> Study:
    """Per verifier: with a score, the test metrics at its default threshold and at the one `calibrate`
    chose on dev; without one (exact, random), at its fixed behaviour."""
    pairs = keyed(pairs)
    dev, test = select_split(pairs, dev_split, path), select_split(pairs, test_split, path)
    cache, rows, calibrations, curves = ScoreCache(out / SCORES_FILE), [], {}, {}
    for name in names:
        verdicts = scored(name, dev + test, cache, build)
        dev_verdicts, test_verdicts = verdicts[:len(dev)], verdicts[len(dev):]
        default = DEFAULT_THRESHOLDS[name]
        if not has_score(name):
            rows.append(_row(name, default, "fixed", test, [v.accept for v in test_verdicts]))
            continue
        chosen = calibrate(dev, dev_verdicts, f"{path} [{dev_split}]", min_precision)
        calibrations[name] = chosen
        curves[name] = curve([p.equivalent for p in test], test_verdicts)
        source = f"chosen on {dev_split}" + ("" if chosen.met_precision else f" (precision < {min_precision} there)")
        for threshold, where in ((default, "default"), (chosen.threshold, source)):
            rows.append(_row(name, threshold, where, test, [accepted_at(v, threshold) for v in test_verdicts]))
    return Study(pairs=str(path), dev_split=dev_split, test_split=test_split, min_precision=min_precision,
                 rows=rows, calibrations=calibrations, curves=curves)


def metric_cell(value: float | None, interval: tuple[float, float] | None) -> str:
    """0.912 [0.800, 1.000]; n/a where the metric is undefined."""
    if value is None:
        return "n/a"
    return f"{value:.3f}" + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")


def markdown(study: Study) -> str:
    n_test = study.rows[0].metrics.n if study.rows else 0
    lines = [
        f"# Verifier study on {study.pairs}", "",
        f"Thresholds chosen on split `{study.dev_split}` (best accuracy at precision ≥ {study.min_precision}); "
        f"metrics on split `{study.test_split}` (n = {n_test}) with 95 % bootstrap intervals over pairs.", "",
        "| verifier | threshold | from | precision [95 % CI] | recall [95 % CI] | F1 [95 % CI] | n |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in study.rows:
        m = r.metrics
        lines.append(f"| {r.verifier} | {r.threshold:.3f} | {r.source} | {metric_cell(m.precision, m.precision_ci)} | "
                     f"{metric_cell(m.recall, m.recall_ci)} | {metric_cell(m.f1, m.f1_ci)} | {m.n} |")
    return "\n".join(lines) + "\n"


def plot(study: Study, path: Path) -> None:
    """Precision against recall on test, a line per scored verifier; a dot at the threshold chosen on dev,
    a cross at the default, a square for a verifier without a score."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, points in study.curves.items():
        color = ax.plot([r for r, _ in points], [p for _, p in points], label=name)[0].get_color()
        for row in (r for r in study.rows if r.verifier == name and r.metrics.precision is not None):
            marker = "x" if row.source == "default" else "o"
            ax.plot(row.metrics.recall or 0.0, row.metrics.precision, marker, color=color, markersize=8)
    for row in (r for r in study.rows if r.source == "fixed" and r.metrics.precision is not None):
        ax.plot(row.metrics.recall or 0.0, row.metrics.precision, "s", label=row.verifier)
    ax.set(xlabel="recall", ylabel="precision", xlim=(0, 1.02), ylim=(0, 1.02),
           title=f"split {study.test_split}: o chosen on {study.dev_split}, x default")
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_study(pairs: list[LabelledPair], path: Path, names: list[str], build: Callable[[str], Verifier], out: Path,
                dev_split: str, test_split: str, min_precision: float = 0.92) -> Study:
    """Run the study and write study.md, study.json and pr.png into `out` (scores.jsonl fills as it goes)."""
    study = run_study(pairs, path, names, build, out, dev_split, test_split, min_precision)
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.md").write_text(markdown(study), encoding="utf-8")
    (out / "study.json").write_text(study.model_dump_json(indent=2), encoding="utf-8")
    plot(study, out / "pr.png")
    return study
