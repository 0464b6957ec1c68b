"""The eval report: accuracy, acceptance, speedup against AR and throughput per method.

Speedup is paired: for every (problem, sample) that both AR and the method finished,
AR wall time / method wall time. The report gives the mean, the median and the spread
(min-max) of those ratios, and the aggregate (total AR time / total method time).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from pydantic import BaseModel

from lookahead_reasoning.eval.records import EvalRecord


class MethodSummary(BaseModel):
    method: str
    n: int
    graded: int
    accuracy: float | None
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
        out.append(MethodSummary(
            method=method, n=len(rows), graded=len(graded),
            accuracy=sum(graded) / len(graded) if graded else None,
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
            max_tokens_hits=sum(r.finish == "max_tokens" for r in rows),
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


def markdown_report(summaries: list[MethodSummary], title: str, notes: list[str]) -> str:
    lines = [f"# {title}", ""]
    lines += [f"> {note}" for note in notes]
    if notes:
        lines.append("")
    lines += [
        "| method | n | accuracy | score | acceptance | speedup mean | median | min–max | aggregate | tokens/s | mean wall s | cut at cap |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        spread = "n/a" if s.speedup_min is None else f"{s.speedup_min:.2f}–{s.speedup_max:.2f}"
        lines.append(
            f"| {s.method} | {s.n} | {_f(s.accuracy, '.1%')} | {_f(s.mean_score)} | {_f(s.acceptance_rate, '.2f')} | "
            f"{_f(s.speedup_mean, '.2f', '×')} | {_f(s.speedup_median, '.2f', '×')} | {spread} | "
            f"{_f(s.speedup_aggregate, '.2f', '×')} | {_f(s.tokens_per_s, '.1f')} | {s.mean_wall_s:.1f} | {s.max_tokens_hits} |"
        )
    return "\n".join(lines) + "\n"


def plot_report(summaries: list[MethodSummary], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s.method for s in summaries]
    panels = [
        ("accuracy", [s.accuracy if s.accuracy is not None else (s.mean_score or 0) / 10 for s in summaries]),
        ("speedup vs AR (median)", [s.speedup_median or 0 for s in summaries]),
        ("tokens / s", [s.tokens_per_s or 0 for s in summaries]),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, (label, values) in zip(axes, panels):
        ax.bar(names, values, color="#4c72b0")
        ax.set_title(label)
        if label.startswith("speedup"):
            ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(records: list[EvalRecord], methods: list[str], out: Path, title: str, notes: list[str]) -> list[MethodSummary]:
    summaries = summarize(records, methods)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(
        {"title": title, "notes": notes, "methods": [s.model_dump() for s in summaries]}, indent=2
    ))
    (out / "report.md").write_text(markdown_report(summaries, title, notes))
    if summaries:
        plot_report(summaries, out / "report.png", title)
    return summaries
