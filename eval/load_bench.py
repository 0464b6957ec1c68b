"""`lookahead bench load`: speedup against AR as load rises, on simulated servers.

Load is two things at once here. `batch_slope` says what parallel requests cost a server
(0: a batch costs one request, an idle GPU; 1: linear, a CPU or a saturated GPU), and
`concurrency` is how many requests run at once. Every method at a point runs the same
requests on the same servers: `concurrency` threads, each taking the next request as soon as its
last one is done, until max(`min_requests`, `REQUESTS_PER_THREAD` × `concurrency`) are done, so
that most of a point runs at its concurrency. (With as many requests as threads, a point at 16 or
64 would be one burst that starts together and then drains to fewer at a time: its p50 would be that
burst's, not that of a load held at its concurrency.) The lookahead methods of one point share one engine
configuration and, for the adaptive policy, one policy and cost model, as the requests
of `lookahead serve` do; the adaptive policy first serves unmeasured waves of other
requests like them (`WARMUP_WAVES`, or fewer where they reach `WARMUP_REQUESTS`), as a
serving process that has been up for a while has learned its costs and α from earlier
requests. Other requests, not the same ones again: the simulated judge's verdicts are fixed
per (problem, step), and while AR wins a drafted probe comes at the same step of a problem
each time (after a stretch of 8 of its 10 steps), so waves of the same problems would judge the
same few steps over and over, and one unlucky draw would hold α̂ far under α for the whole point.

Reported per point: tokens/s (all output tokens / wall time), p50 and p99 request
latency, speedup_vs_ar = AR's p50 latency / the method's p50 latency at the same
(slope, concurrency), and throughput_vs_ar = the method's tokens/s / AR's. The two can
disagree under load: the wall time ends with the slowest request, and drafting spreads the finishing
times, so a method can bring the median request in ahead of AR's while the last one ends later.
With `repeats` > 1 every method of a point runs that many times, AR first each time (side by
side, so that each ratio compares runs a few seconds apart on a noisy machine), and each
figure is the median over the repeats, each ratio the median of the per-repeat ratios. The methods
after AR take turns: each repeat starts them at another place in their list (`_repeat_order`), so that
no method is always the one measured last: where a method runs in its repeat moves it by about 5 % on
a 2-core machine (docs/figures.md, "Noise on two shared cores").
"""

from __future__ import annotations

import json
import math
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Union

from pydantic import BaseModel, Field, model_validator

from lookahead_reasoning.eval.bench import questions
from lookahead_reasoning.eval.loadtest import percentile
from lookahead_reasoning.eval.report import markdown_table
from lookahead_reasoning.eval.simcluster import LatencyModel, SimCluster
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.errors import LookaheadError

Depth = Union[Literal["ar", "adaptive"], int]
WARMUP_WAVES = 3  # the adaptive policy's unmeasured waves of a point's requests before its measured one...
WARMUP_REQUESTS = 48  # ...fewer where fewer waves reach this many requests (64 at a time: one wave)
REQUESTS_PER_THREAD = 3  # a point's requests: at least this many per concurrent thread (see the docstring)


class LoadGrid(BaseModel):
    slopes: list[float] = [0.0, 0.1, 1.0]
    concurrency: list[int] = [1, 4, 16, 64]
    depths: list[Depth] = ["ar", 2, 4, "adaptive"]
    engines: list[Literal["sync", "async"]] = ["sync", "async"]
    alpha: float = Field(0.7, gt=0.0, lt=1.0)
    c: float = Field(0.1, gt=0.0)
    # 32: the simulated judge's verdicts are one fixed draw per (problem, step), and over 16 ten-step requests
    # that draw alone can put one γ a few per cent ahead of the one that is best in expectation.
    min_requests: int = Field(32, ge=1, description="requests per point: this many, or three per concurrent "
                                                     "request if more")
    repeats: int = Field(1, ge=1, le=20, description="runs of every point; the medians are reported")

    @model_validator(mode="after")
    def _valid(self):
        if not (self.slopes and self.concurrency and self.depths and self.engines):
            raise ValueError("every grid axis needs at least one value")
        if any(s < 0 for s in self.slopes):
            raise ValueError(f"batch slopes must be >= 0, got {self.slopes}")
        if any(n < 1 for n in self.concurrency):
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if any(d not in ("ar", "adaptive") and (not isinstance(d, int) or d < 1) for d in self.depths):
            raise ValueError(f"depths are 'ar', 'adaptive' or numbers >= 1, got {self.depths}")
        if "ar" not in self.depths:  # the reference of every speedup
            self.depths = ["ar", *self.depths]
        return self

    @classmethod
    def quick(cls) -> LoadGrid:
        return cls(slopes=[0.0, 1.0], concurrency=[1, 16], depths=["ar", 2, "adaptive"], engines=["sync"],
                   min_requests=16)


class LoadPoint(BaseModel):
    slope: float
    concurrency: int
    engine: str
    depth: Depth
    width: int = 1
    tokens_per_s: float
    p50_s: float
    p99_s: float
    speedup_vs_ar: float
    throughput_vs_ar: float
    acceptance_rate: float | None = None


@dataclass
class _Measured:
    """One run of a point's method: the problems run `concurrency` at a time."""

    wall: float
    latencies: list[float]
    tokens: int  # output tokens, all requests
    judged: int
    accepted: int

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall


def _run_point(cluster: SimCluster, depth: Depth, engine: str, problems: list[str], concurrency: int,
               latency: LatencyModel) -> _Measured:
    """`problems` measured; an adaptive policy first learns on warm-up waves of as many other problems."""
    extra = {"adaptive_depth": True, "depth": 2} if depth == "adaptive" else {"depth": 1 if depth == "ar" else depth}
    config = LookaheadConfig(engine=engine, seed=1, max_tokens=100_000, max_step_tokens=latency.step_tokens + 8,
                             **extra)
    from lookahead_reasoning.runtime.reasoner import LookaheadReasoner  # imports SGLang: only when measuring

    reasoner = LookaheadReasoner(cluster.endpoints(), config)

    def one(question: str) -> tuple[float, int, int, int]:
        t0 = time.perf_counter()
        if depth == "ar":
            out = reasoner.baseline(question)
            return time.perf_counter() - t0, out.output_tokens, 0, 0
        result = reasoner.run(question)
        if result.stats.finish != "eos" or result.stats.degraded:
            raise LookaheadError(f"a run did not finish cleanly: {result.stats.finish} {result.stats.degraded}")
        s = result.stats
        return time.perf_counter() - t0, s.output_tokens, s.draft_steps_judged, s.draft_steps_accepted

    with ThreadPoolExecutor(concurrency) as pool:
        if depth == "adaptive":  # a serving process has run for a while: its policy has learned the costs
            for wave in range(min(WARMUP_WAVES, math.ceil(WARMUP_REQUESTS / len(problems)))):
                list(pool.map(one, questions(latency.model_copy(update={"problems": len(problems)}),
                                             label=f"Warm-up {wave}, problem")))
        started = time.perf_counter()
        outcomes = list(pool.map(one, problems))
    wall = time.perf_counter() - started
    return _Measured(wall, [o[0] for o in outcomes], sum(o[1] for o in outcomes), sum(o[2] for o in outcomes),
                     sum(o[3] for o in outcomes))


def run_load_grid(grid: LoadGrid, latency: LatencyModel,
                  progress: Callable[[LoadPoint], None] | None = None) -> list[LoadPoint]:
    points: list[LoadPoint] = []
    with SimCluster(latency) as cluster:
        for slope in grid.slopes:
            cluster.configure(grid.alpha, grid.c, batch_slope=slope)
            for concurrency in grid.concurrency:
                count = max(grid.min_requests, REQUESTS_PER_THREAD * concurrency)
                problems = questions(latency.model_copy(update={"problems": count}))
                methods = [("-", "ar")] + [(engine, depth) for engine in grid.engines
                                           for depth in grid.depths if depth != "ar"]
                runs: dict[tuple[str, Depth], list[_Measured]] = {method: [] for method in methods}
                finished: dict[tuple[str, Depth], LoadPoint] = {}
                for repeat in range(grid.repeats):
                    for engine, depth in _repeat_order(methods, repeat, grid.repeats):
                        try:
                            measured = _run_point(cluster, depth, grid.engines[0] if depth == "ar" else engine,
                                                  problems, concurrency, latency)  # AR: any engine, it runs none
                        except LookaheadError as error:
                            raise LookaheadError(f"load point slope={slope} concurrency={concurrency} "
                                                 f"γ={depth} {engine}: {error}") from None
                        runs[(engine, depth)].append(measured)
                        if repeat == grid.repeats - 1:  # the method's last run: its point is final
                            point = _summary(slope, concurrency, engine, depth, runs[(engine, depth)],
                                             runs[("-", "ar")])
                            finished[(engine, depth)] = point
                            if progress is not None:
                                progress(point)
                points.extend(finished[method] for method in methods)  # in the methods' order, whichever ran last
    return points


def _repeat_order(methods: list, repeat: int, repeats: int) -> list:
    """AR (`methods[0]`) first, the reference of the repeat's speedups; the others rotated so that over the
    repeats each starts at evenly spread places in their turn."""
    ar, others = methods[:1], methods[1:]
    shift = repeat * len(others) // repeats
    return ar + others[shift:] + others[:shift]


def _summary(slope: float, concurrency: int, engine: str, depth: Depth, runs: list[_Measured],
             ar_runs: list[_Measured]) -> LoadPoint:
    """The point's medians over its repeats; each ratio to AR is the median of each repeat's against its AR."""
    judged, accepted = sum(run.judged for run in runs), sum(run.accepted for run in runs)
    return LoadPoint(
        slope=slope, concurrency=concurrency, engine=engine, depth=depth,
        tokens_per_s=statistics.median(run.tokens_per_s for run in runs),
        p50_s=statistics.median(run.p50 for run in runs),
        p99_s=statistics.median(percentile(run.latencies, 0.99) for run in runs),
        speedup_vs_ar=statistics.median(ar.p50 / run.p50 for run, ar in zip(runs, ar_runs)),
        throughput_vs_ar=statistics.median(run.tokens_per_s / ar.tokens_per_s for run, ar in zip(runs, ar_runs)),
        acceptance_rate=accepted / judged if judged else None,
    )


def load_table(points: list[LoadPoint]) -> str:
    headers = ["slope", "concurrency", "engine", "γ", "tokens/s", "p50 s", "p99 s", "speedup vs AR", "tokens/s vs AR",
               "α"]
    return markdown_table(headers, [
        [f"{p.slope:g}", str(p.concurrency), p.engine, str(p.depth), f"{p.tokens_per_s:.1f}", f"{p.p50_s:.2f}",
         f"{p.p99_s:.2f}", f"{p.speedup_vs_ar:.2f}", f"{p.throughput_vs_ar:.2f}",
         "" if p.acceptance_rate is None else f"{p.acceptance_rate:.2f}"]
        for p in points
    ])


def write_load_report(points: list[LoadPoint], out: Path) -> None:
    """load.json, load.md, and load.png: speedup against concurrency, one line per method, one panel per slope."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "load.json").write_text(json.dumps({"points": [p.model_dump() for p in points]}, indent=2))
    (out / "load.md").write_text(load_table(points))
    slopes = sorted({p.slope for p in points})
    fig, axes = plt.subplots(1, len(slopes), figsize=(4.5 * len(slopes), 3.8), squeeze=False)
    for ax, slope in zip(axes[0], slopes):
        methods = sorted({(p.engine, str(p.depth)) for p in points if p.slope == slope})
        for engine, depth in methods:
            series = sorted((p for p in points if p.slope == slope and p.engine == engine and str(p.depth) == depth),
                            key=lambda p: p.concurrency)
            label = "AR" if depth == "ar" else f"{engine} γ={depth}"
            ax.plot([p.concurrency for p in series], [p.speedup_vs_ar for p in series], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_title(f"batch slope {slope:g}")
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel("speedup over AR (p50 latency)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "load.png", dpi=110)
    plt.close(fig)
