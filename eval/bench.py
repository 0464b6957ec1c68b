"""`lookahead bench sim`: the runtime's scheduling against the theory, on simulated servers.

For every grid point (α, c, γ, engine, W) the real engines and programs run over HTTP
against three simulated SGLang servers (draft, target, judge; see simserver.py) in
their own processes. AR is measured once per (α, c) on the same servers and the same
problems. Reported per point:

- measured_speedup = AR wall time / method wall time (summed over the problems);
- theory_speedup = runtime.adaptive.theory at the configured c, the latency model's judge cost j,
  and the α the run realized (accepted / decided draft positions; for W > 1 that is
  the per-position acceptance of the tree, the theory's effective α). Using the
  realized α keeps the ratio about the runtime, not about the luck of a few judge draws;
- ratio = measured / theory;
- finite_theory_speedup: the same theory for a problem of exactly `LatencyModel.steps` steps
  (eval.finite_theory.finite_speedup, same α, c, j and W). The endless formulas assume every round can
  keep as many steps as γ allows; the last rounds of a 12-step problem cannot (the draft stops at
  EOS, and there is no bonus step after it), so the endless theory overstates what such a problem can
  gain (on the quick grid by up to 14 %: 3 % at γ = 1, more at larger γ and α). Adaptive points take
  the best over γ (and W), as theory_speedup does;
- finite_ratio = measured / finite_theory_speedup: what is left of the gap once the problems' length
  is accounted for (per-request latency, client-side work, the luck of a few problems' verdicts);
- pattern_theory_speedup: the same cost model replayed on the verdicts the runs drew
  (eval.finite_theory.pattern_time; `drawn_verdicts` reads them from the round log: per step, accepted,
  rejected, or a bonus step nobody judged, and for trees whether the walk took the first candidate, which
  decides whether the async engine's next window is used). The simulated judge draws one verdict per (problem, step) for
  a chain, shared by every γ at the same α, so with a few problems the expected theory sits several %
  above or below what the draws allow, the same way at every point of an α; this one does not. Fixed γ
  only (adaptive rounds change γ and cap steps);
- pattern_ratio = measured / pattern_theory_speedup: the runtime's own efficiency against the theory's
  rounds (request trips, client-side work, servers and client sharing the machine's cores);
- overhead_ms_per_round: median over rounds of the round's wall time not covered by
  any HTTP request in flight (client-side scheduling and program overhead);
- prefix_hit_ratio: cached / prompt tokens over the target's branches.

The simulated cluster and its latency model live with the simulated server (simserver.py);
the JSON, markdown and plots of a run are written by bench_report.py.
"""

from __future__ import annotations

import statistics
from typing import Callable, Literal, Union

from pydantic import BaseModel, model_validator

from lookahead_reasoning.eval.simcluster import LatencyModel, SimCluster
from lookahead_reasoning.eval import finite_theory
from lookahead_reasoning.runtime.adaptive import theory
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.adaptive.depth import depth_limit
from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.runtime.results import LookaheadResult

Depth = Union[int, Literal["adaptive"]]


class Grid(BaseModel):
    alphas: list[float] = [0.4, 0.6, 0.8]
    cs: list[float] = [0.05, 0.1, 0.25]
    depths: list[Depth] = [1, 2, 4, 6, "adaptive"]
    engines: list[Literal["sync", "async"]] = ["sync", "async"]
    widths: list[int] = [1, 2, 4]

    @model_validator(mode="after")
    def _valid(self):
        for a in self.alphas:
            if not 0.0 < a < 1.0:
                raise ValueError(f"α must lie in (0, 1), got {a}")
        for c in self.cs:
            if c <= 0.0:
                raise ValueError(f"c must be > 0, got {c}")
        for d in self.depths:
            if d != "adaptive" and d < 1:
                raise ValueError(f"γ must be >= 1 or 'adaptive', got {d}")
        for w in self.widths:
            if w < 1:
                raise ValueError(f"W must be >= 1, got {w}")
        return self

    @classmethod
    def quick(cls) -> Grid:
        return cls(alphas=[0.6, 0.8], cs=[0.1], depths=[1, 2, 4, "adaptive"], engines=["sync", "async"], widths=[1, 2])


class BenchPoint(BaseModel):
    alpha: float
    c: float
    depth: Depth
    width: int
    engine: str
    measured_speedup: float
    theory_speedup: float
    ratio: float
    finite_theory_speedup: float
    finite_ratio: float
    pattern_theory_speedup: float | None = None
    pattern_ratio: float | None = None
    overhead_ms_per_round: float
    prefix_hit_ratio: float | None
    realized_alpha: float | None
    ar_s: float
    method_s: float
    rounds: int


def questions(latency: LatencyModel, label: str = "Problem") -> list[str]:
    """`latency.problems` simulated questions; another `label` gives other problems (other verdicts)."""
    return [
        f"{label} {p}: " + " ".join(f"q{p}w{i}" for i in range(latency.question_words))
        for p in range(latency.problems)
    ]


def _overheads(result: LookaheadResult, log: list[tuple[float, float]]) -> list[float]:
    """Per round: wall time not covered by any request in flight, in ms."""
    out = []
    for record in result.round_log:
        start, end = record.started, record.started + record.wall_s
        spans = sorted((max(a, start), min(b, end)) for a, b in log if b > start and a < end)
        covered, cursor = 0.0, start
        for a, b in spans:
            if b > cursor:
                covered += b - max(a, cursor)
                cursor = b
        out.append(max(0.0, (end - start) - covered) * 1000.0)
    return out


def measure_method(
    cluster: SimCluster, config: LookaheadConfig, problems: list[str]
) -> tuple[float, list[LookaheadResult], list[float]]:
    from lookahead_reasoning.runtime.reasoner import LookaheadReasoner  # imports SGLang: only when measuring

    reasoner = LookaheadReasoner(cluster.endpoints(), config)
    log: list[tuple[float, float]] = []
    for backend in reasoner.connection.backends.values():
        backend.request_log = log
    results, wall = [], 0.0
    for q in problems:
        result = reasoner.run(q)
        if result.stats.finish != "eos" or result.stats.degraded:
            raise LookaheadError(f"benchmark run did not finish cleanly: {result.stats.finish} {result.stats.degraded}")
        results.append(result)
        wall += result.stats.wall_time_s
    overheads = [o for r in results for o in _overheads(r, log)]
    return wall, results, overheads


def measure_ar(cluster: SimCluster, problems: list[str]) -> float:
    from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

    reasoner = LookaheadReasoner(cluster.endpoints(), LookaheadConfig(max_tokens=100_000))
    return sum(reasoner.baseline(q).wall_time_s for q in problems)


def run_grid(
    grid: Grid, latency: LatencyModel, progress: Callable[[BenchPoint], None] | None = None
) -> list[BenchPoint]:
    points: list[BenchPoint] = []
    problems = questions(latency)
    j = latency.judge_cost()
    with SimCluster(latency) as cluster:
        for alpha in grid.alphas:
            for c in grid.cs:
                cluster.configure(alpha, c)
                ar_s = measure_ar(cluster, problems)
                for engine in grid.engines:
                    for width in grid.widths:
                        for depth in grid.depths:
                            config = LookaheadConfig(
                                engine=engine, width=width, seed=1, max_tokens=100_000,
                                max_step_tokens=latency.step_tokens + 8,
                                **({"adaptive_depth": True} if depth == "adaptive" else {"depth": depth}),
                            )
                            try:
                                wall, results, overheads = measure_method(cluster, config, problems)
                            except LookaheadError as error:
                                raise LookaheadError(
                                    f"grid point α={alpha} c={c} γ={depth} W={width} {engine}: {error}"
                                ) from None
                            decided = sum(r.stats.draft_steps_judged for r in results)
                            accepted = sum(r.stats.draft_steps_accepted for r in results)
                            realized = accepted / decided if decided else None
                            at = realized if realized is not None else alpha
                            theory_s = _theory(engine, depth, at, c, j, width, alpha)
                            finite_s = _theory(engine, depth, at, c, j, width, alpha, steps=latency.steps)
                            pattern_s = None if depth == "adaptive" else _pattern_theory(engine, depth, c, j, width,
                                                                                          results)
                            prompt = sum(r.stats.target.prompt_tokens for r in results)
                            cached = sum(r.stats.target.cached_tokens for r in results)
                            measured = ar_s / wall
                            point = BenchPoint(
                                alpha=alpha, c=c, depth=depth, width=width, engine=engine,
                                measured_speedup=measured, theory_speedup=theory_s, ratio=measured / theory_s,
                                finite_theory_speedup=finite_s, finite_ratio=measured / finite_s,
                                pattern_theory_speedup=pattern_s,
                                pattern_ratio=None if pattern_s is None else measured / pattern_s,
                                overhead_ms_per_round=statistics.median(overheads) if overheads else 0.0,
                                prefix_hit_ratio=cached / prompt if prompt else None, realized_alpha=realized,
                                ar_s=ar_s, method_s=wall, rounds=sum(r.stats.rounds for r in results),
                            )
                            points.append(point)
                            if progress is not None:
                                progress(point)
    return points


def _theory(
    engine: str, depth: Depth, alpha: float, c: float, j: float, width: int, judge_alpha: float,
    steps: int | None = None,
) -> float:
    """The theory's speedup at a grid point: endless (`steps` None) or for problems of `steps` steps."""
    alpha = min(max(alpha, 0.0), 0.999)

    def speedup(d: int, a: float, w: int, window: bool | None = None) -> float:
        if steps is None:
            return theory.engine_speedup(engine, d, a, c, j, w, window=window)
        return finite_theory.finite_speedup(engine, d, a, c, j, w, window=window, steps=steps)

    if depth != "adaptive":
        return speedup(depth, alpha, width)
    if width == 1:  # the best the theory allows at the realized α, within the policy's depth limit (AR included)
        return max([1.0] + [speedup(d, alpha, 1) for d in range(1, 9)])
    # adaptive with trees picks W too, and its rounds mix widths: the best over widths 1..W, each at the
    # α the simulated judge gives it (it accepts each candidate independently with `judge_alpha`)
    window = engine == "async"
    return max([1.0] + [  # AR included
        speedup(d, min(1 - (1 - judge_alpha) ** w, 0.999), w, window)
        for w in range(1, width + 1) for d in range(1, depth_limit(8, w) + 1)
    ])


def drawn_verdicts(result: LookaheadResult) -> tuple[list[bool | None], list[bool]]:
    """Per step of a run's answer, the verdict its position drew: True for an accepted draft, False where a
    rejection kept the target's step instead, None for a step no draft competed for (a bonus step); and
    whether it was accepted with the first candidate at every level of its round so far (trees)."""
    drawn: list[bool | None] = []
    first: list[bool] = []
    for record in result.round_log:
        decided = [True] * record.accepted + [False] * (record.positions - record.accepted)
        drawn += decided + [None] * (len(record.kept) - len(decided))
        first += [i < record.first_candidates for i in range(len(record.kept))]
    return drawn, first


def _pattern_theory(
    engine: str, depth: int, c: float, j: float, width: int, results: list[LookaheadResult]
) -> float | None:
    """The theory's speedup on the verdicts the runs drew: AR's steps over the time of the theory's rounds
    on them, over all problems. None where the theory's rounds need a verdict the run never drew, which a
    fixed γ cannot do unless the engine left the theory's rounds."""
    patterns = [drawn_verdicts(result) for result in results]
    try:
        return sum(len(verdicts) for verdicts, _ in patterns) / sum(
            finite_theory.pattern_time(engine, depth, verdicts, c, j, width, first_candidate=first)
            for verdicts, first in patterns)
    except ValueError:
        return None


def alpha_shift_check(latency: LatencyModel, default_depth: int = 4, c: float = 0.1, steps: int = 40) -> dict:
    """Adaptive γ against the default fixed γ when α drops from 0.9 to 0.2 halfway through each problem.

    The problems are longer than the grid's (`steps`), so that each half has room for
    the policy to notice the change.
    """
    latency = latency.model_copy(update={"steps": steps})
    problems = questions(latency)
    schedule = [(0, 0.9), (latency.steps // 2, 0.2)]
    out = {}
    with SimCluster(latency) as cluster:
        cluster.configure(0.5, c, schedule)
        ar_s = measure_ar(cluster, problems)
        for name, extra in (("fixed", {"depth": default_depth}), ("adaptive", {"adaptive_depth": True, "depth": default_depth})):
            config = LookaheadConfig(seed=1, max_tokens=100_000, max_step_tokens=latency.step_tokens + 8, **extra)
            wall, _, _ = measure_method(cluster, config, problems)
            out[name] = ar_s / wall
    return out
