"""The report of `lookahead bench sim`: bench.json, a markdown table (bench.md) and PNG plots.

The grid and the measurements are in bench.py; this module only writes their results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from lookahead_reasoning.eval.report import markdown_table

if TYPE_CHECKING:
    from lookahead_reasoning.eval.bench import BenchPoint


def write_report(points: list[BenchPoint], out: Path, extra: dict | None = None) -> None:
    """JSON, a markdown table, and PNG plots (speedup against γ per α, measured and theory)."""
    out.mkdir(parents=True, exist_ok=True)
    payload = {"points": [p.model_dump() for p in points], **(extra or {})}
    (out / "bench.json").write_text(json.dumps(payload, indent=2))
    (out / "bench.md").write_text(bench_table(points))
    _plots(points, out)


def _f(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def bench_table(points: list[BenchPoint]) -> str:
    """One row per point; "N-step theory" is the theory for problems of the latency model's length, "drawn
    theory" the same on the verdicts the problems drew (chains; bench.py)."""
    headers = ["α", "c", "γ", "W", "engine", "measured", "theory", "ratio", "N-step theory", "N-step ratio",
               "drawn theory", "drawn ratio", "overhead ms/round", "prefix hit", "realized α"]
    return markdown_table(headers, [
        [str(p.alpha), str(p.c), str(p.depth), str(p.width), p.engine, f"{p.measured_speedup:.2f}",
         f"{p.theory_speedup:.2f}", f"{p.ratio:.2f}", f"{p.finite_theory_speedup:.2f}", f"{p.finite_ratio:.2f}",
         _f(p.pattern_theory_speedup), _f(p.pattern_ratio),
         f"{p.overhead_ms_per_round:.1f}", _f(p.prefix_hit_ratio), _f(p.realized_alpha)]
        for p in points
    ])


def _plots(points: list[BenchPoint], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for engine in sorted({p.engine for p in points}):
        for width in sorted({p.width for p in points}):
            chosen = [p for p in points if p.engine == engine and p.width == width and p.depth != "adaptive"]
            if not chosen:
                continue
            fig, ax = plt.subplots(figsize=(6, 4))
            for alpha in sorted({p.alpha for p in chosen}):
                for c in sorted({p.c for p in chosen}):
                    series = sorted((p for p in chosen if p.alpha == alpha and p.c == c), key=lambda p: p.depth)
                    xs = [p.depth for p in series]
                    line = ax.plot(xs, [p.measured_speedup for p in series], marker="o", label=f"α={alpha}, c={c}")
                    ax.plot(xs, [p.theory_speedup for p in series], linestyle="--", color=line[0].get_color())
                    ax.plot(xs, [p.finite_theory_speedup for p in series], linestyle=":", color=line[0].get_color())
            ax.set_xlabel("γ (draft steps per round)")
            ax.set_ylabel("speedup over AR")
            ax.set_title(f"{engine} engine, W={width}: measured (solid), theory (dashed, N steps dotted)",
                         fontsize=9)
            ax.legend(fontsize=7)
            fig.tight_layout()
            fig.savefig(out / f"speedup_{engine}_w{width}.png", dpi=110)
            plt.close(fig)
