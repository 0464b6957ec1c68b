"""`lookahead sweep`: tree width W against depth γ, the paper's Table 3.

Every (W, γ) is one LR method (`lr-w{W}-d{γ}`) in one eval run beside AR, so all cells
share the problems, servers and sampling settings, and the run resumes like any eval.
The table gives, per cell, accuracy / acceptance rate / speedup (median of the paired
AR/LR time ratios).
"""

from __future__ import annotations

from pathlib import Path

from lookahead_reasoning.eval.report import MethodSummary
from lookahead_reasoning.eval.runner import MethodSpec
from lookahead_reasoning.runtime.config import LookaheadConfig


def cell_name(width: int, depth: int) -> str:
    return f"lr-w{width}-d{depth}"


def sweep_methods(widths: list[int], depths: list[int], config: LookaheadConfig) -> list[MethodSpec]:
    specs = [MethodSpec("ar", "ar", config)]
    for width in widths:
        for depth in depths:
            specs.append(MethodSpec(cell_name(width, depth), "lr", config.model_copy(update={"width": width, "depth": depth})))
    return specs


def _cell(summary: MethodSummary | None) -> str:
    if summary is None:
        return "–"
    accuracy = "n/a" if summary.accuracy is None else f"{summary.accuracy:.0%}"
    acceptance = "n/a" if summary.acceptance_rate is None else f"{summary.acceptance_rate:.2f}"
    speedup = "n/a" if summary.speedup_median is None else f"{summary.speedup_median:.2f}×"
    return f"{accuracy} / {acceptance} / {speedup}"


def table3(summaries: list[MethodSummary], widths: list[int], depths: list[int]) -> str:
    by_name = {s.method: s for s in summaries}
    ar = by_name.get("ar")
    lines = [
        "accuracy / acceptance / speedup (median AR time ÷ LR time) per tree width W and depth γ"
        + (f"; AR accuracy {ar.accuracy:.0%}" if ar and ar.accuracy is not None else ""),
        "",
        "| W \\ γ | " + " | ".join(str(d) for d in depths) + " |",
        "|---|" + "---|" * len(depths),
    ]
    for width in widths:
        cells = [_cell(by_name.get(cell_name(width, depth))) for depth in depths]
        lines.append(f"| {width} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_sweep(summaries: list[MethodSummary], widths: list[int], depths: list[int], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_name = {s.method: s for s in summaries}
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, field, label in zip(
        axes, ("speedup_median", "acceptance_rate", "accuracy"), ("speedup vs AR (median)", "acceptance rate", "accuracy")
    ):
        for width in widths:
            values = [getattr(by_name.get(cell_name(width, d)), field, None) for d in depths]
            points = [(d, v) for d, v in zip(depths, values) if v is not None]
            if points:
                ax.plot([d for d, _ in points], [v for _, v in points], marker="o", label=f"W = {width}")
        ax.set_xlabel("γ (depth)")
        ax.set_title(label)
        ax.set_xticks(depths)
        if field == "speedup_median":
            ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
