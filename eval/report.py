"""The eval report: accuracy, acceptance, speedup against a baseline method and throughput per method.

The baseline is AR unless asked otherwise (LR against `lr-random` shows what the verifier keeps).
Accuracy comes with a 95 % Wilson interval. The accuracy difference against the baseline is paired:
over the (problem, sample) pairs both graded, the mean of (method right) − (baseline right), with a
95 % percentile-bootstrap interval over those pairs. Speedup is paired too: baseline wall time /
method wall time per pair; the report gives the mean, the median and the spread (min-max) of
those ratios, and the aggregate (total baseline time / total method time).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import scipy.stats
from pydantic import BaseModel

from lookahead_reasoning.eval.records import EvalRecord
from lookahead_reasoning.errors import LookaheadError


class MethodSummary(BaseModel):
    method: str
    baseline: str  # the method the differences and speedups are against
    n: int
    graded: int
    accuracy: float | None
    accuracy_ci: tuple[float, float] | None = None  # 95 % Wilson
    accuracy_vs_baseline: float | None = None  # paired mean of (right here) − (right with the baseline)
    accuracy_vs_baseline_ci: tuple[float, float] | None = None  # 95 % paired bootstrap
    mean_score: float | None  # judge-scored datasets (MT-Bench)
    acceptance_rate: float | None  # accepted / decided draft positions
    speedup_mean: float | None
    speedup_median: float | None
    speedup_min: float | None
    speedup_max: float | None
    speedup_aggregate: float | None
    paired: int  # (problem, sample) pairs the speedup is over
    tokens_per_s: float | None
    mean_wall_s: float
    max_tokens_hits: int  # answers cut at the token cap
    degraded: int  # runs where a draft or judge failure was worked around


def wilson_interval(right: int, n: int) -> tuple[float, float] | None:
    """The 95 % Wilson score interval of a proportion (sound at 0 and n, unlike the normal one)."""
    if n == 0:
        return None
    ci = scipy.stats.binomtest(right, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def paired_difference(pairs: list[tuple[bool, bool]], resamples: int = 2000,
                      seed: int = 0) -> tuple[float | None, tuple[float, float] | None]:
    """Mean of (a right) − (b right) over (a, b) pairs and its 95 % percentile-bootstrap interval."""
    if not pairs:
        return None, None
    diffs = np.array([int(a) - int(b) for a, b in pairs], dtype=float)
    mean = float(diffs.mean())
    if len(diffs) == 1:  # scipy asks for two observations; one pair resamples only to itself
        return mean, (mean, mean)
    ci = scipy.stats.bootstrap((diffs,), np.mean, n_resamples=resamples, method="percentile",
                               rng=np.random.default_rng(seed)).confidence_interval
    return mean, (float(ci.low), float(ci.high))


def summarize(records: list[EvalRecord], methods: list[str], baseline: str = "ar") -> list[MethodSummary]:
    by_method: dict[str, dict[tuple[str, int], EvalRecord]] = {m: {} for m in methods}
    for r in records:
        if r.method in by_method:
            by_method[r.method][(r.problem_id, r.sample)] = r
    base = by_method.get(baseline, {})
    out = []
    for method in methods:
        rows = list(by_method[method].values())
        if not rows:
            continue
        graded = [r.correct for r in rows if r.correct is not None]
        scores = [r.score for r in rows if r.score is not None]
        judged = sum(r.draft_steps_judged for r in rows)
        ratios, base_total, method_total = [], 0.0, 0.0
        for key, r in by_method[method].items():
            if key in base and r.wall_s > 0:
                ratios.append(base[key].wall_s / r.wall_s)
                base_total += base[key].wall_s
                method_total += r.wall_s
        wall = sum(r.wall_s for r in rows)
        both = [(r.correct, base[key].correct) for key, r in by_method[method].items()
                if key in base and r.correct is not None and base[key].correct is not None]
        diff, diff_ci = paired_difference(both) if method != baseline else (None, None)
        out.append(MethodSummary(
            method=method, baseline=baseline, n=len(rows), graded=len(graded),
            accuracy=sum(graded) / len(graded) if graded else None,
            accuracy_ci=wilson_interval(sum(graded), len(graded)),
            accuracy_vs_baseline=diff, accuracy_vs_baseline_ci=diff_ci,
            mean_score=statistics.fmean(scores) if scores else None,
            acceptance_rate=sum(r.draft_steps_accepted for r in rows) / judged if judged else None,
            speedup_mean=statistics.fmean(ratios) if ratios else None,
            speedup_median=statistics.median(ratios) if ratios else None,
            speedup_min=min(ratios) if ratios else None,
            speedup_max=max(ratios) if ratios else None,
            speedup_aggregate=base_total / method_total if method_total > 0 else None,
            paired=len(ratios),
            tokens_per_s=sum(r.output_tokens for r in rows) / wall if wall > 0 else None,
            mean_wall_s=wall / len(rows),
            max_tokens_hits=sum(r.cut_at_cap for r in rows),
            degraded=sum(bool(r.degraded) for r in rows),
        ))
    return out


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _f(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def _points(value: float | None, interval: tuple[float, float] | None, signed: bool = False) -> str:
    """A proportion in percentage points with its interval: 81.3 [70.1, 89.0]."""
    if value is None:
        return "n/a"
    spec = "+.1f" if signed else ".1f"
    text = f"{100 * value:{spec}}"
    if interval is not None:
        text += f" [{100 * interval[0]:{spec}}, {100 * interval[1]:{spec}}]"
    return text


def _baseline_name(summaries: list[MethodSummary]) -> str:
    baseline = summaries[0].baseline if summaries else "ar"
    return "AR" if baseline == "ar" else baseline


def markdown_report(summaries: list[MethodSummary], title: str, notes: list[str]) -> str:
    lines = [f"# {title}", ""]
    lines += [f"> {note}" for note in notes]
    if notes:
        lines.append("")
    baseline = _baseline_name(summaries)
    lines += [
        f"| method | n | accuracy % [95 % CI] | vs {baseline}, points [95 % CI] | score | acceptance | speedup mean | median "
        "| min–max | aggregate | tokens/s | mean wall s | cut at cap |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        spread = "n/a" if s.speedup_min is None else f"{s.speedup_min:.2f}–{s.speedup_max:.2f}"
        lines.append(
            f"| {s.method} | {s.n} | {_points(s.accuracy, s.accuracy_ci)} | "
            f"{_points(s.accuracy_vs_baseline, s.accuracy_vs_baseline_ci, signed=True)} | {_f(s.mean_score)} | {_f(s.acceptance_rate, '.2f')} | "
            f"{_f(s.speedup_mean, '.2f', '×')} | {_f(s.speedup_median, '.2f', '×')} | {spread} | "
            f"{_f(s.speedup_aggregate, '.2f', '×')} | {_f(s.tokens_per_s, '.1f')} | {s.mean_wall_s:.1f} | {s.max_tokens_hits} |"
        )
    return "\n".join(lines) + "\n"


def plot_report(summaries: list[MethodSummary], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s.method for s in summaries]
    accuracy = [s.accuracy if s.accuracy is not None else (s.mean_score or 0) / 10 for s in summaries]
    below = [a - s.accuracy_ci[0] if s.accuracy_ci else 0 for a, s in zip(accuracy, summaries)]
    above = [s.accuracy_ci[1] - a if s.accuracy_ci else 0 for a, s in zip(accuracy, summaries)]
    panels = [
        ("accuracy (95 % CI)", accuracy, [below, above]),
        (f"speedup vs {_baseline_name(summaries)} (aggregate)", [s.speedup_aggregate or 0 for s in summaries], None),
        ("tokens / s", [s.tokens_per_s or 0 for s in summaries], None),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, (label, values, errors) in zip(axes, panels):
        ax.bar(names, values, color="#4c72b0", yerr=errors, capsize=4 if errors else 0)
        ax.set_title(label)
        if label.startswith("speedup"):
            ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report_stem(baseline: str) -> str:
    """The file name (without suffix) of a report: `report` against AR, `report-vs-B` against B."""
    return "report" if baseline == "ar" else f"report-vs-{baseline}"


def write_report(records: list[EvalRecord], methods: list[str], out: Path, title: str, notes: list[str],
                 baseline: str = "ar") -> list[MethodSummary]:
    summaries = summarize(records, methods, baseline)
    out.mkdir(parents=True, exist_ok=True)
    stem = report_stem(baseline)
    (out / f"{stem}.json").write_text(json.dumps(
        {"title": title, "notes": notes, "baseline": baseline, "methods": [s.model_dump() for s in summaries]},
        indent=2,
    ))
    (out / f"{stem}.md").write_text(markdown_report(summaries, title, notes))
    if summaries:
        plot_report(summaries, out / f"{stem}.png", title)
    return summaries


def kept_records(records: list[EvalRecord], ar_finishes: bool) -> list[EvalRecord]:
    """With `ar_finishes`, the records of the problems whose AR answers all ended before the cap."""
    if not ar_finishes:
        return records
    cut = {r.problem_id for r in records if r.method == "ar" and r.cut_at_cap}
    answered = {r.problem_id for r in records if r.method == "ar"}
    return [r for r in records if r.problem_id in answered - cut]


def _folder_records(folder: Path) -> tuple[dict, list[EvalRecord]]:
    """A results folder's pinned settings (eval.json, {} without one) and its kept records."""
    from lookahead_reasoning.eval.records import ResultStore, read_pin

    pin_path, results = folder / "eval.json", folder / "results.jsonl"
    if not results.exists():
        raise LookaheadError(f"{folder} holds no results.jsonl (the folder `lookahead eval --out` wrote)")
    pinned = read_pin(pin_path) if pin_path.exists() else {}
    return pinned, kept_records(list(ResultStore(results).load().values()), bool(pinned.get("ar_finishes")))


def _differences(pins: list[dict]) -> list[str]:
    """The engine settings in which pooled folders differ, as `name a / b`."""
    configs = [pin.get("config", {}) for pin in pins]
    keys = sorted({key for config in configs for key in config})
    return [f"{key} {' / '.join(str(c.get(key)) for c in configs)}" for key in keys
            if len({json.dumps(c.get(key), sort_keys=True) for c in configs}) > 1]


def report_folders(folders: list[Path], baseline: str = "ar",
                   out: Path | None = None) -> tuple[list[MethodSummary], str, list[str]]:
    """Rebuild the report of a results folder (complete or not) against `baseline`, in that folder; or pool
    several folders' results into one report in `out`. Pooled folders must hold the same dataset, asked of the
    same models, and no problem twice; the settings they differ in are named in the notes."""
    if not folders:
        raise LookaheadError("give at least one results folder")
    if len(folders) > 1 and out is None:
        raise LookaheadError("a report over several folders needs --out, the folder to write it to")
    loaded = [_folder_records(folder) for folder in folders]
    pins = [pin for pin, _ in loaded]
    for field in ("dataset", "models"):
        if len({json.dumps(pin.get(field), sort_keys=True) for pin in pins}) > 1:
            raise LookaheadError(f"the folders differ in their {field}: pool only runs of one dataset and models")
    seen: dict[str, Path] = {}
    for folder, (_, records) in zip(folders, loaded):
        for problem in {r.problem_id for r in records}:
            if problem in seen:
                raise LookaheadError(f"{problem} is in both {seen[problem]} and {folder}: pool only disjoint runs")
            seen[problem] = folder
    records = [r for _, folder_records in loaded for r in folder_records]
    methods = list(dict.fromkeys([m for pin in pins for m in pin.get("methods", [])] + [r.method for r in records]))
    if baseline not in methods:
        raise LookaheadError(f"baseline {baseline!r} is not a method of {', '.join(map(str, folders))}; "
                             f"its methods: {', '.join(methods)}")
    pinned = pins[0]
    title = f"{pinned.get('dataset', folders[0].name)}: {len(seen)} problems"
    config = pinned.get("config", {})
    notes = [f"verifier {config.get('verifier')}, γ = {config.get('depth')}, max_tokens {config.get('max_tokens')}"] \
        if config else []
    if len(folders) > 1:
        notes.append(f"pooled from {', '.join(str(f) for f in folders)}"
                     + "".join(f"; {difference}" for difference in _differences(pins)))
    if any(pin.get("ar_finishes") for pin in pins):
        notes.append(f"only problems whose AR answer ends before {config.get('max_tokens')} tokens")
    if any((pin.get("concurrency") or 1) > 1 for pin in pins):
        notes.append(f"{max(pin.get('concurrency') or 1 for pin in pins)} problems at once: times are under that load")
    return write_report(records, methods, out or folders[0], title, notes, baseline), title, notes
