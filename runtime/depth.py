"""How many steps to draft each round: a fixed γ, or γ chosen from what the runs measure.

The adaptive policy keeps, across the runs it serves, an estimate of α (per-position
acceptance, a Beta(½, ½) prior, a long memory that restarts when recent rounds say α changed:
AcceptanceTally) and a CostModel of the servers (cost_model.py: the target alone, forks of n
branches B(n), the draft's c and the verifier's j). Each round it picks the γ, 0 (plain
AR) included, with the highest expected speedup under those costs (theory.py with the
branch-cost term), over AR as it runs here: stretches that pay a request's fixed cost once (`_ar_step`). With no data, its first rounds run the target alone (AR rounds: they
advance like any other; the first of a run, which prefills the prompt, is not timed, the
next measures the lone target step), then a fork probe measures what a second branch
costs. If even free, always accepted drafts could not beat AR by `CEILING_MARGIN` at
that cost, it never drafts; otherwise one round drafts one step, to measure the draft
and the verifier, and from then on it plans. That round is a measuring round: the target
writes only its own step after the prefix, not the branch after the draft, and the verifier
judges the draft against it, so it costs c + j over an AR step where a γ = 1 round costs
c + B(2) + j (on a linear CPU server, c + 2 + j: the branch would keep a second step only
where the draft is accepted). The margin is 15 %: real drafts are not
free, and with branches at s ≥ 0.85 (where the ceiling, (γ+1)/(1 + sγ) for one run, is
under 1.15 at γ ≤ 8) even a good draft (c = 0.05, α = 0.9, j = 0.05) loses; a margin of
5 % let a single fork probe that read s = 0.92 on a linear CPU server buy a drafted
round there (3 target steps' time, a quarter of a short problem). A fork's branches
are counted by their tokens: a branch half as long as the longest was in flight for
half the time.

What an extra target branch costs (the slope behind B(n)) is learned from a fork probe:
an AR round whose fork also writes the first `PROBE_SHARE` of the same step once more.
The short branch runs beside the real one for k of its L tokens, so the round takes
o + L·t₁ + k·u: the model fits u (and so s) from it, at a quarter of the cost of a whole second
step. When AR wins it drafts nothing, and now and then probes again to see
whether things changed (a fork probe while the branches alone make lookahead lose,
else a drafted round): the probes are spaced so that what they cost stays within
`PROBE_BUDGET` of the run's time. A fork probe's price is its extra branch and the fixed cost of
two more requests (the lone step before it and its fork, where a stretch would have written both
steps): priced by the branch alone, the probes of the real CPU Qwen pair cost 5 % where the budget
assumed 2. Each fork probe after which the model still plans AR doubles the spacing of fork
probes, up to `PROBE_BACKOFF` times the budget's: probes that keep agreeing are spent more rarely,
and a change is still seen within PROBE_BACKOFF spacings (the plan turning to drafting resets it).
Drafted probes keep the budget's spacing: they renew α̂ too, which a few unlucky rejections at the
start can hold low. A drafted probe loses on every step its round keeps (1 + α
for sync at γ = 1; the async chain pipeline drafts on while its drafts are accepted, 1 / (1 − α)),
so its spacing, in AR steps, counts them all.

The model can miss costs (a client that runs out of CPU under load, a server that is
sublinear where the fit is linear), so the rounds themselves are the last word: when the
rounds that drafted did not advance at least `GAIN_TO_DRAFT` as fast (tokens per second) as AR
rounds, it runs AR whatever the model says. A drafting round of a forking engine (sync, async
windows) costs the same whatever its verdicts, so it counts the tokens a round of its shape keeps on average at
α̂, not what its luck kept: the rates then measure costs, and α̂ alone carries acceptance. (Counting
what they kept, a few unlucky early rounds at slope 0 × 4 sync read 0.57 of AR's rate and held the
runs at AR for the whole benchmark, where fixed γ = 2 gained 1.18×.) Each kind's measurement ages as rounds of the other kind go by
(`STALE_FORGET` per round of each run), so that the next round of that kind weighs more. While
AR runs, drafting is measured by the drafted probes alone. A probe of a run alone (no other run
shares the policy) after AR rounds renews the drafting rate: what it held counts at most
`STALE_WEIGHT` of the probe's own time. Aging alone let tens of drafting rounds measured under
load outweigh probe after probe, and `lookahead serve` stayed at AR for 200 requests after the
load had gone (CI at 7bb4c03). With other runs in flight a probe is a lone drafted round among
runs at AR, which gets more than its share of the server and the client and reads fast: it adds
to the rate like any round (letting it renew the rate made 16 runs draft together after every
probe, slope 0 × 16 sync: 0.31× AR). (The measurement used to
expire after a few tens of rounds, and then every run drafted until two drafting rounds were
timed: under 64 runs, a burst of drafting rounds on a client already out of CPU.) Its drafted probes run the γ and W
the model would run: a γ = 1 round can lose to AR stretches where a deeper one wins, and
probing at γ = 1 would then keep the rates saying AR.

Drafting is rationed across the runs that share the policy: at most `draft_slots` of them are in a
drafting round at once, and a run whose plan would draft beyond that writes AR instead. Where the
measured rates say drafting pays (so the slots widen within a round or two) it is a short stretch, the
fewest steps that keep a request's fixed cost within `RATIONED_OVERHEAD` (a lone step where it is small),
and the run asks again soon: a whole stretch there locked the runs that a burst of 16 left out into AR for
8 of their 10 steps (0.84 of fixed γ = 2 at slope 0 × 16 sync). Otherwise a whole stretch: short ones
whatever the rates said ran slope 0 × 64 at 0.68× (sync, lone steps) and 0.85× AR (async, 10 % stretches),
where a request's fixed cost is about half a step. At 10 % where they pay, one of five runs of that async
point still read 0.89× (a few runs drafting among many at AR read fast, so the rates say drafting pays
before it does); at 4 %, 0.98–0.99 in five runs, and a run at 16 writes 3 steps where it wrote 8.
It starts at one run; each timed drafting round doubles it (up to every run) while the measured
rates say drafting is 6 % faster than AR (`GAIN_TO_WIDEN`), if it began with every slot taken,
and halves it when they say drafting gains under 3 % (`GAIN_TO_DRAFT`, below which the runs write AR
whatever the model says). The margins are there because the rates lean toward drafting (a few drafting
runs among runs at AR get more than their share of the client), and where drafting barely wins on
average its slowest requests lose more: at slope 0 × 16 async, rates that read drafting 1.03× and
0.99× as fast as AR let every run draft, and the point ran at 0.92× and 0.83× AR. (Until 79e4556 the
simulator undercounted a drafted step's tokens by one in 17, which had stood in for these margins.)
Without the rationing, whenever the plan turned to drafting (the cold start's round that measures
the draft, the first plans after it), every run in flight drafted at once, deep, before one drafting
round was timed: 0.37× AR at slope 0 × 16 sync on a client out of CPU. The share grows step by step
because a few runs drafting among runs at AR read faster than all of them drafting would.

The rates measure what a drafting round costs its own run, not what it costs the runs beside it, and
on one client the runs share its CPU: every request costs the client work (HTTP, JSON, the SGLang
frontend), a drafted token 4 to 17 times an AR token's in a stretch, and once the client's Python
threads hold the interpreter most of the time, every request waits for the others. So the slots widen
only while the client process uses under `CLIENT_CORES_TO_WIDEN` of a core, and halve (once per
change: see `_ration`) while it uses over `CLIENT_CORES_TO_NARROW` (client_cpu.py, over the last second): one
core is what the interpreter lock lets Python threads use, whatever the machine has. At slope 0 × 64 on
2 cores, drafting rounds read 1.3–1.9× as fast as AR rounds while every run slowed (fixed γ = 1–4 kept
the client at 0.9 cores and ran at half AR's tokens/s; AR at 0.12 cores): the slots widened to 16–60
and the point ran at 0.77–0.85× AR's tokens/s; with the meter, 0.92–0.95. The margins sit near the one
core because busy is not yet harmful: at 16 runs, where every run drafting gains 1.3–1.6× p50, the
client used 0.55–0.70 cores (async; sync 0.3), and limits of 0.5 and 0.75 held that point at 1.05×.
Later in a wave there it reaches 0.85–0.9 cores while drafting still gains 1.3–1.5×: limits of 0.7 and
0.85 ran it at 1.28× AR where fixed γ = 4 ran at 1.55×, and 0.8 and 0.9 at 1.53× (two sets of 10 repeats),
with slope 0 × 64 still at 0.97× (async) and 0.99× (sync) AR. (That point still swings: docs/figures.md,
session 26. Judging each widening by the whole set's rate, by the CPU the wider slots would use, or only once a
round of every drafting run has ended each read worse at 16 or 64 runs side by side, measured while the client
still paused 0.3 s for full garbage collections, which much of the swing was: session 28, heap.py.)

While drafting wins, an AR round now and then (an AR check, spaced like the probes)
keeps the target's time alone measured: with every round at one γ, the slope would not
be identifiable (every fork at one width fits any split of its time between t₁ and the
slope), and the model could settle on a split that keeps it drafting where AR is faster.
The checks also keep the measured AR rate fresh for the comparison above. Like a probe, a check
due at a run's first round (not timed) comes in the run's next round.

Between probes, while AR wins, an AR round writes several steps in one request (an AR
stretch, no stop at the delimiter), as the target alone would: a request per step costs
client and server work that plain AR does not pay, and under load that alone makes AR
rounds lose to the target alone. A stretch is `AR_STRETCH_STEPS` steps, so that streaming
stays responsive, or more where a request's fixed cost would be over `STRETCH_OVERHEAD` of
that (a client short of CPU under many runs), and at most about `AR_STRETCH_SECONDS` long,
so that deadlines and cancellation stay responsive. It is never cut short to meet a probe's
turn (the probe comes a little late): a short stretch pays the fixed cost for a few steps,
and where runs share the count, all of their stretches near the turn would be cut.
Stretches are timed like any target request (their time per token, not their length
as a step's): they keep the fit current between probes, and their lengths, unlike
steps of one typical length, tell a request's fixed cost apart from its time per token.
The AR round just before each fork probe writes a lone step. A run's first round is never a
probe: it is not timed (its request prefills the prompt), so where a probe is due it writes a
lone step and the probe comes in the run's next round. (Drafted probes used to land there: each
request of `lookahead serve` is a stretch to its end, so the probe's turn came at a request's
first round, and almost none of them was measured.) One run at a time puts a probe off so: the
first rounds of other runs meanwhile run on as AR (64 runs starting together all wrote a lone step
first), and whichever run's round comes next takes the probe.

With `--width W` > 1 it also picks the width, 1 to W. It learns the per-position
acceptance of each width it runs; a width it has not run gets its α from the width it
knows best, as if candidates were accepted independently: α_w = 1 − (1 − α₁)^w. It
starts drafting with chains (W = 1), whose α is measured directly; independence is the
optimistic case for trees (sampled candidates resemble each other), so it tries a tree
when one could pay, and from then on plans with the tree's own α. A tree of width W
has W^γ leaves, and each distinct prefix is a target branch; the policy caps γ for
trees so that W^γ stays within `TREE_NODE_BUDGET` (W = 2: γ ≤ 4).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from lookahead_reasoning.runtime.client_cpu import ClientCpu
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.cost_model import CostEstimate, CostModel, per_run
from lookahead_reasoning.runtime.results import RoundRecord
from lookahead_reasoning.runtime.theory import engine_speedup, round_steps, tree_branches
from lookahead_reasoning.verifiers.base import ExactMatchVerifier

TREE_NODE_BUDGET = 16  # leaves; the drafting itself is capped by LookaheadConfig.max_tree_nodes
PROBE_BUDGET = 0.02  # share of the time that probes may cost while AR wins
PROBE_SHARE = 0.25  # a fork probe's extra branch writes this share of a step (at least PROBE_MIN_TOKENS)
PROBE_MIN_TOKENS = 4
AR_STRETCH_STEPS = 8  # most steps an AR round writes in one request while AR wins
AR_STRETCH_SECONDS = 60.0  # ...and about this long at most, so that the run stays responsive
STRETCH_OVERHEAD = 0.02  # ...but more steps where a request's fixed cost would be more than this share of it
RATIONED_OVERHEAD = 0.04  # a run the drafting slots leave out writes the fewest steps that keep it within this
PROBE_SPACING = (6, 400)  # AR rounds between probes: at least, at most
PROBE_BACKOFF = 8  # fork probes' spacing doubles, up to this many times the budget's, while they leave the model at AR
CEILING_MARGIN = 1.15  # drafting is tried only if free, always accepted drafts would beat AR by more than this
GAIN_TO_DRAFT = 1.03  # drafting rounds measured slower than this against AR rounds (tokens/s): run AR
STALE_FORGET = 0.98  # per round of the other kind (of each run): a measurement of AR or drafting rounds ages
STALE_RENEW = 0.9  # one run alone: a drafting rate aged below this is renewed by the next drafting round...
STALE_WEIGHT = 0.5  # ...where what it held counts at most this share of that round's own time
ALPHA_SLOW_FORGET = 0.99  # per round of each run: α̂'s long memory, kept while recent rounds agree with it
ALPHA_SHIFT_Z = 3.0  # recent rounds this many standard errors away from it: acceptance changed, the memory restarts
GAIN_TO_WIDEN = 1.06  # drafting rounds measured at least this fast against AR rounds: twice the runs may draft at once
CLIENT_CORES_TO_WIDEN = 0.8  # the client's CPU (cores) under which the drafting slots may widen...
CLIENT_CORES_TO_NARROW = 0.9  # ...and over which they halve: its interpreter lock runs about one core


def _spacing(loss: float) -> int:
    """Rounds (steps) between two rounds that each lose `loss` of one, so that they cost PROBE_BUDGET at most."""
    return min(PROBE_SPACING[1], max(PROBE_SPACING[0], math.ceil(loss / PROBE_BUDGET)))


def depth_limit(max_depth: int, width: int) -> int:
    if width == 1:
        return max_depth
    limit = 1
    while width ** (limit + 1) <= TREE_NODE_BUDGET:
        limit += 1
    return min(max_depth, limit)


@dataclass(frozen=True)
class RoundPlan:
    """What the next round does."""

    depth: int  # draft steps; 0: an AR round (the target alone)
    width: int = 1  # draft candidates per position
    probe_tokens: int = 0  # an AR round's fork probe: the cap of its short second branch (B(2))
    stretch_tokens: int = 0  # an AR round that writes several steps in one request: its token cap
    measuring: bool = False  # a drafted step (γ = 1) whose target writes only its own step: it prices the draft


class TargetLoad:
    """Target requests in flight across the runs that share a policy (`lookahead serve`: other runs come
    and go), so that a request's load is what it saw on average over its tokens.

    Averaged over tokens, not time: a token written beside x others takes (1 + s·x) times as long, so
    the cost model's T = o + L·(t₁ + u·x̄) holds with the token average, where a time average of a
    bursty load would overstate x (a request that shares the server for a third of its time writes
    less than a third of its tokens then). The weights take s = 1, where it matters; with free
    branches (s = 0) the time any x costs is nothing, so x's weighting does not matter there."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_flight = 0
        self._events: list[tuple[float, int]] = [(time.monotonic(), 0)]  # (from when, requests in flight)
        self._marks: list[float] = []  # when each tracked block still running started

    def started(self, requests: int) -> float:
        with self._lock:
            now = time.monotonic()
            self.in_flight += requests
            self._events.append((now, self.in_flight))
            self._marks.append(now)
            return now

    def finished(self, requests: int, mark: float) -> float:
        """The mean number of *other* target requests in flight over the tokens of `requests` started at `mark`."""
        with self._lock:
            now = time.monotonic()
            weighted = weights = 0.0
            segments = [e for e in self._events if e[0] >= mark]
            for (since, in_flight), until in zip(segments, [e[0] for e in segments[1:]] + [now]):
                others = max(0, in_flight - requests)
                weight = (until - since) / (1.0 + others)  # the share of the tokens written then
                weighted += others * weight
                weights += weight
            self.in_flight -= requests
            self._events.append((now, self.in_flight))
            self._marks.remove(mark)
            oldest = min(self._marks, default=now)
            self._events = [e for e in self._events if e[0] >= oldest]  # the one just added stays
            return weighted / weights if weights > 0 else 0.0

    @contextmanager
    def track(self, requests: int) -> Iterator[Tracked]:
        """`requests` in flight for the block; after it, `.others` is what else was in flight meanwhile."""
        tracked, mark = Tracked(), self.started(requests)
        try:
            yield tracked
        finally:
            tracked.others = self.finished(requests, mark)


@dataclass
class Tracked:
    others: float = 0.0  # the mean number of other target requests in flight, over the block's tokens


class DepthPolicy(Protocol):
    target_load: TargetLoad  # where the engines report their target requests in flight

    def run_started(self) -> None: ...

    def run_finished(self) -> None: ...

    def next_round(self, seconds_left: float | None = None, first: bool = False) -> RoundPlan: ...

    def peek_round(self) -> RoundPlan: ...

    def observe(self, record: RoundRecord) -> None: ...

    def cost_estimate(self) -> CostEstimate | None: ...


class FixedDepth:
    def __init__(self, depth: int, width: int = 1):
        self.depth = depth
        self.width = width
        self.target_load = TargetLoad()

    def run_started(self) -> None:
        pass

    def run_finished(self) -> None:
        pass

    def next_round(self, seconds_left: float | None = None, first: bool = False) -> RoundPlan:
        return RoundPlan(self.depth, self.width)

    def peek_round(self) -> RoundPlan:
        return RoundPlan(self.depth, self.width)

    def observe(self, record: RoundRecord) -> None:
        pass

    def cost_estimate(self) -> CostEstimate | None:
        return None


class AcceptanceTally:
    """Accepted and rejected draft positions on two time scales, for α̂ (a Beta(½, ½) prior).

    The estimate is the long memory (`ALPHA_SLOW_FORGET`): with the policy's own forgetting alone
    (0.9 a round), one run's α̂ rested on about 25 positions, ±0.09 at α = 0.7, and a low draw planned
    γ = 2 where γ = 4 was best (slope 0 × 1 sync: α̂ 0.55 at α 0.7, 0.92 of fixed γ = 4). The short
    memory (the policy's forgetting) watches for a change: when it lies more than `ALPHA_SHIFT_Z`
    standard errors from the long one, acceptance has changed (another kind of problem, another
    phase of one), and the long memory restarts from the short one.
    """

    PRIOR_MEAN = 0.5  # α̂ before any position was judged

    def __init__(self) -> None:
        self.fast = (0.0, 0.0)
        self.slow = (0.0, 0.0)

    @staticmethod
    def _mean(tally: tuple[float, float]) -> float:
        # a weak prior: a strong one drags α̂ toward ½ and the chosen γ too low when α is high
        return (tally[0] + 0.5) / (tally[0] + tally[1] + 1.0)

    @property
    def positions(self) -> float:
        return sum(self.slow)

    def estimate(self, optimistic: bool = False) -> float:
        """α̂; `optimistic`: one standard error above it (see AdaptiveDepth._model_plan)."""
        mean = self._mean(self.slow)
        if not optimistic:
            return mean
        return min(0.999, mean + math.sqrt(mean * (1.0 - mean) / (self.positions + 1.0)))

    def add(self, accepted: float, rejected: float, forget: float, slow_forget: float) -> None:
        self.fast = (forget * self.fast[0] + accepted, forget * self.fast[1] + rejected)
        self.slow = (slow_forget * self.slow[0] + accepted, slow_forget * self.slow[1] + rejected)
        long = self._mean(self.slow)
        error = math.sqrt(long * (1.0 - long) / (sum(self.fast) + 1.0))
        if abs(self._mean(self.fast) - long) > ALPHA_SHIFT_Z * error:
            self.slow = self.fast


class AdaptiveDepth:
    def __init__(
        self, mode: str, initial: int, max_depth: int, width: int = 1, forget: float = 0.9,
        costs: CostModel | None = None, max_nodes: int | None = None, client_cpu: ClientCpu | None = None,
    ):
        self.mode = mode
        self.width = width  # the largest W it may choose
        self.initial = initial
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.forget = forget
        self.costs = costs or CostModel()
        self._lock = threading.Lock()
        self._tallies: dict[int, AcceptanceTally] = {}  # width -> its accepted and rejected positions
        self._rates: dict[str, tuple[float, float]] = {}  # "ar"/"draft" -> (tokens, seconds), forgetting
        self._rounds_timed: dict[str, int] = {}  # "ar"/"draft" -> rounds measured in all
        self.last_width = 1  # of the last round that drafted
        self.ar_rounds = 0  # steps AR rounds wrote since the last probe (as observed: a stretch may end early)
        self._draft_freshness = 1.0  # how much the measured drafting rate has aged since its last round (1: none)
        self._lone_before_probe = False  # the lone step before a fork probe was planned
        self._backoff = 1  # the fork probes' spacing multiple: doubled by each fork probe while the model plans AR
        self.drafting_rounds = 0  # drafting rounds since the last AR check
        self.active_runs = 0  # runs in flight that share this policy (`lookahead serve`)
        self.draft_slots = 1  # how many of those may be in a drafting round at once (rationing, see the docstring)
        self._slots_filled = math.inf  # time.perf_counter() when every drafting slot was taken since they changed
        self._slots_changed = -math.inf  # time.perf_counter() when they last changed
        self._drafting: set[int] = set()  # the threads of the runs whose round in flight drafts
        self.client_cpu = client_cpu  # how busy the client process is (None: not watched)
        self._probe_claim: int | None = None  # the thread of the run whose first round put off a due probe
        self.target_load = TargetLoad()  # the target requests in flight across those runs
        self._ceiling_kept: tuple[tuple[int, int] | None, float] = (None, 0.0)  # (costs.version, runs), _ceiling()
        # draft once (γ = 1) even when the branches alone rule lookahead out, to measure c, j and α for a
        # report (`lookahead demo`); runs that only want the answer fast leave this off
        self.measure_drafting = False

    def run_started(self) -> None:
        with self._lock:
            self.active_runs += 1

    def run_finished(self) -> None:
        with self._lock:
            self.active_runs = max(0, self.active_runs - 1)
            self._drafting.discard(threading.get_ident())
            if self._probe_claim == threading.get_ident():
                self._probe_claim = None

    def _concurrency(self) -> int:
        return max(1, self.active_runs)

    def _branch_cost(self, n: int) -> float:
        return self.costs.branch_cost(n, self._concurrency())

    def alpha_at(self, width: int, optimistic: bool = False) -> float:
        """Per-position acceptance at `width`: measured, or derived from the best-known width. `optimistic`:
        one standard error above the estimate (see _model_plan: it decides whether to draft, not how deep)."""
        tally = self._tallies.get(width)
        if tally is not None and tally.positions >= 1.0:
            return tally.estimate(optimistic)
        if not self._tallies:
            return AcceptanceTally.PRIOR_MEAN
        known, tally = max(self._tallies.items(), key=lambda item: item[1].positions)
        return 1.0 - (1.0 - tally.estimate(optimistic)) ** (width / known)

    @property
    def alpha(self) -> float:
        """Per-position acceptance at the width the last drafting round used."""
        return self.alpha_at(self.last_width)

    @property
    def _window(self) -> bool:
        """Whether the async engine pipelines windows (a tree config, at any width) rather than steps."""
        return self.mode == "async" and self.width > 1

    def _speedup(self, depth: int, width: int, alpha: float, c: float, judge: float,
                 ar_step: float | None = None) -> float:
        """The expected speedup of a round of (γ, W) over AR as this policy runs it (`_ar_step`)."""
        return engine_speedup(self.mode, depth, alpha, c, judge, width, self._branch_cost, self.max_nodes,
                              self._window) * (self._ar_step() if ar_step is None else ar_step)

    def _ar_step(self) -> float:
        """The time of an AR step as AR rounds write it, over a target step's S = o + L̄·t: the theory prices AR
        at S a step, but AR here writes stretches of k steps, which pay the request's fixed cost o once,
        (o/k + L̄·t)/S = 1 − (o/S)(1 − 1/k). Where o is a large share of a step (a client short of CPU under
        64 runs: o ≈ half a step), the theory against AR at S overstated drafting by 1.45×."""
        steps = self._stretch(None)[0]
        return 1.0 - self.costs.request_share(self._concurrency()) * (1.0 - 1.0 / steps)

    def _best(self, width: int, alpha: float, c: float, judge: float | None = None) -> tuple[int, float]:
        """(γ, speedup) at `width`; `judge` None: j from the cost model for each γ's pairs."""
        best, ar_step = (0, 1.0), self._ar_step()
        for depth in range(1, depth_limit(self.max_depth, width) + 1):
            j = judge if judge is not None else self.costs.judge_cost(
                tree_branches(depth, width, self.max_nodes) - 1, self._concurrency())
            s = self._speedup(depth, width, alpha, c, j, ar_step)
            if s > best[1] + 1e-12:
                best = (depth, s)
        return best

    @property
    def _forks_itself(self) -> bool:
        """Whether AR rounds of this engine can fork (the async chain pipeline sends lone target steps)."""
        return not (self.mode == "async" and self.width == 1)

    def _ceiling(self) -> float:
        """The speedup drafting would give if every draft were accepted, free and judged for free:
        when even that is within CEILING_MARGIN of 1, the branches alone make lookahead lose, whatever the draft.
        It depends on the costs and the runs in flight alone, and a round's plan asks for it up to three times:
        kept until either changes."""
        key = (self.costs.version, self._concurrency())
        if self._ceiling_kept[0] != key:  # a chain: with every draft accepted, more width only costs
            self._ceiling_kept = (key, self._best(1, 0.999, 1e-3, 0.0)[1])
        return self._ceiling_kept[1]

    def _best_by_width(self, optimistic: bool = False) -> dict[int, tuple[int, float]]:
        """(γ, expected speedup) at each width the policy may choose (empty until it can plan); `optimistic`:
        at α one standard error up."""
        c = self.costs.c(self._concurrency())
        if c is None or not self.costs.ready:
            return {}
        return {w: self._best(w, min(self.alpha_at(w, optimistic), 0.999), max(c, 1e-3))
                for w in range(1, self.width + 1)}

    def width_speedups(self) -> dict[int, float]:
        """The best expected speedup at each width the policy may choose (empty until it can plan)."""
        return {width: speedup for width, (_, speedup) in self._best_by_width().items()}

    def measured_gain(self) -> float | None:
        """Tokens per second of the rounds that drafted over that of AR rounds, as measured (None until
        both have a few rounds): what the model may miss, such as a client that runs out of CPU."""
        if any(self._rounds_timed.get(kind, 0) < 2 for kind in ("ar", "draft")):
            return None
        (ar_tokens, ar_s), (tokens, seconds) = self._rates["ar"], self._rates["draft"]
        return (tokens / seconds) / (ar_tokens / ar_s)

    def _plan(self) -> tuple[int, int, float]:
        """(γ, W, expected speedup) under the current estimates; nan where it is not known yet."""
        best = self._model_plan()
        gain = self.measured_gain()
        if best[0] and not math.isnan(best[2]) and gain is not None and gain < GAIN_TO_DRAFT:
            return 0, 1, 1.0  # the model says drafting pays, the rounds say it does not: they win
        return best

    def _model_plan(self) -> tuple[int, int, float]:
        """What the cost model alone would plan (the measured rates may overrule it)."""
        c = self.costs.c(self._concurrency())
        if self.costs.target_alone_unknown:
            return 0, 1, math.nan  # an AR round measures the lone target step
        if not self.costs.slope_known:
            return (0, 1, math.nan) if self._forks_itself else (self.initial, 1, math.nan)  # a fork probe, or a fork
        if self._ceiling() <= CEILING_MARGIN:
            return (1, 1, math.nan) if self.measure_drafting and c is None else (0, 1, 1.0)
        if c is None or not self.costs.ready:
            return 1, 1, math.nan  # branches may pay: draft one step to measure the draft and the verifier
        best = self._best_plan(optimistic=False)
        if not best[0] and self._best_plan(optimistic=True)[0]:
            # α̂ says AR, one standard error up it says drafting: draft one step, which judges more positions.
            # Never deeper on so little: one accepted draft (α̂ 0.75 ± 0.31) priced α at 0.999 and planned
            # γ = 8 on the CPU Qwen pair, where a drifted fit read B(2) = 1.15 (it is 1.9): a 179 s round
            # that ran its problem at 0.49× AR. At α̂ itself, three unlucky verdicts at the start (α̂ 0.38
            # where α was 0.7) held 16 runs at AR for most of 64 problems at slope 0 (the drafted probes judge
            # one position now and then).
            alpha = min(self.alpha_at(1, optimistic=True), 0.999)
            return 1, 1, self._speedup(1, 1, alpha, max(c, 1e-3), self.costs.judge_cost(1, self._concurrency()))
        return best

    def _best_plan(self, optimistic: bool) -> tuple[int, int, float]:
        """(γ, W, expected speedup) of the best plan at α̂ (`optimistic`: one standard error up); AR at 1.0."""
        best = (0, 1, 1.0)
        for width, (depth, speedup) in self._best_by_width(optimistic).items():
            if speedup > best[2] + 1e-9:
                best = (depth, width, speedup)
        return best

    def _probe_is_a_fork(self) -> bool:
        """Probe the branches alone (cheap) while they make lookahead lose; else draft."""
        return self._forks_itself and (self.costs.c() is None or self._ceiling() <= CEILING_MARGIN)

    def _drafted_probe(self) -> tuple[int, int, float]:
        """(γ, W, loss in AR steps) of a drafted probe. Where the measured rates overrule the model, what the
        model would run: that is what they must measure again (γ = 1 rounds can lose to AR stretches where
        deeper rounds win). One step instead where the model plans AR, or where the model's round would lose
        more than the budget can spread over the longest spacing (deep forks on a client out of CPU)."""
        if self.costs.c() is None:
            return 1, 1, 0.0  # nothing to price a round with yet: one step, which measures c and j
        depth, width, _ = self._model_plan()
        if depth:
            loss = self._drafted_loss(depth, width)
            if loss <= PROBE_BUDGET * PROBE_SPACING[1]:
                return depth, width, loss
        return 1, 1, self._drafted_loss(1, 1)

    def _drafted_loss(self, depth: int, width: int) -> float:
        """What a drafted round of (γ, W) loses against AR writing its steps, in AR steps (ar_rounds counts
        steps): its expected steps times its time per step over AR's, less one."""
        alpha = min(self.alpha_at(width), 0.999)
        pairs = tree_branches(depth, width, self.max_nodes) - 1
        speedup = self._speedup(depth, width, alpha, max(self.costs.c(self._concurrency()), 1e-3),
                                self.costs.judge_cost(pairs, self._concurrency()))
        gain = self.measured_gain()
        speedup = speedup if gain is None else min(speedup, gain)
        return round_steps(self.mode, depth, alpha, self._window) * max(0.0, 1.0 / speedup - 1.0)

    def probe_spacing(self) -> int:
        """AR steps between probes: what keeps a probe's loss against AR within PROBE_BUDGET; for fork probes
        times the backoff (fork probes in a row after which the model still planned AR space the next further)."""
        fork = self._probe_is_a_fork()
        return min(PROBE_SPACING[1], self._budget_spacing(fork) * (self._backoff if fork else 1))

    def _budget_spacing(self, fork: bool) -> int:
        """AR steps between probes that keeps their loss within PROBE_BUDGET (`fork`: fork probes)."""
        if fork:
            # a share of the step twice against once, and two more requests' fixed cost: the lone step
            # before the probe and the probe's fork, where a stretch would have written both steps
            share = self.costs.request_share(self._concurrency())
            return _spacing((self._branch_cost(2) - 1.0) * PROBE_SHARE + 2.0 * share)
        if self.costs.c() is None:
            return PROBE_SPACING[0]
        return _spacing(self._drafted_probe()[2])

    def peek_round(self) -> RoundPlan:
        """The plan of a drafting round that may come next (for drafting ahead); γ ≥ 1."""
        with self._lock:
            depth, width, _ = self._plan()
            return RoundPlan(depth or 1, width)

    def check_spacing(self, speedup: float) -> int:
        """Drafting rounds between AR checks, so that a check's loss against drafting stays within
        PROBE_BUDGET: an AR round where drafting would advance `speedup` times as fast."""
        return _spacing(1.0 - 1.0 / speedup if speedup > 1.0 else 0.0)

    def next_round(self, seconds_left: float | None = None, first: bool = False) -> RoundPlan:
        """The next round; `seconds_left` (a deadline) caps an AR stretch to what fits at the measured speed.
        `first`: a run's first round, which is not timed (its request prefills the prompt), so never a probe:
        where one is due, it writes a lone step and the probe comes in the next round. A run's rounds are
        planned from its own thread (the engines run a run in the caller's thread), which tells the runs
        apart: a drafting plan beyond `draft_slots` runs drafting at once is an AR stretch, and one run at a time
        puts a due probe off at its first round."""
        with self._lock:
            me = threading.get_ident()
            self._drafting.discard(me)
            if self._probe_claim == me:  # its second round: the probe, if no other run took it meanwhile
                self._probe_claim = None
            plan = self._next_round(seconds_left, first, me)
            if plan.depth and len(self._drafting) >= self.draft_slots:
                # others are drafting, and theirs measure it: this run writes AR, a short stretch where the rates
                # say drafting pays (the slots then widen soon), else a whole one
                gain = self.measured_gain()
                return self._stretch_plan(seconds_left, rationed=gain is not None and gain >= GAIN_TO_WIDEN)
            if plan.depth:
                self._drafting.add(me)
                if len(self._drafting) >= self.draft_slots:
                    self._slots_filled = min(self._slots_filled, time.perf_counter())
            return plan

    def _next_round(self, seconds_left: float | None, first: bool, me: int) -> RoundPlan:
        """next_round before rationing, for the run of thread `me`; called under the lock."""
        depth, width, speedup = self._plan()
        if depth and not math.isnan(speedup):
            self._backoff = 1  # the model plans drafting: the probes found what they watch for
            self.drafting_rounds += 1
            if self.drafting_rounds > self.check_spacing(speedup) and not first:  # a first round is not timed
                self.drafting_rounds = 0
                return RoundPlan(0)  # an AR check
        if depth or self.costs.target_alone_unknown:
            return self._drafting_plan(depth, width)
        spacing = self.probe_spacing() if self.costs.slope_known else None
        probe_due = spacing is None or self.ar_rounds >= spacing
        if first and probe_due:  # not timed: the probe comes in the run's next round
            if self._probe_claim is None:
                self._probe_claim = me
                return RoundPlan(0)
            # another run's next round takes it: this one runs on as AR (64 runs starting at once all wrote
            # a lone step first)
            return self._stretch_plan(seconds_left)
        if not self.costs.slope_known:
            return RoundPlan(0, probe_tokens=self._probe_tokens())
        if probe_due:
            if not self._probe_is_a_fork():
                self._probe_taken(fork=False, spacing=spacing)
                depth, width, _ = self._drafted_probe()
                return self._drafting_plan(depth, width)
            if not self._lone_before_probe:  # a fork probe is measured beside a lone step just before it
                self._lone_before_probe = True
                return RoundPlan(0)
            self._lone_before_probe = False
            self._probe_taken(fork=True, spacing=spacing)
            return RoundPlan(0, probe_tokens=self._probe_tokens())
        # a whole stretch even past the probe's turn (which then comes a little late): cut short, it would
        # pay a request's fixed cost for a few steps, and runs sharing the count would all cut theirs
        return self._stretch_plan(seconds_left)

    def _probe_taken(self, fork: bool, spacing: int) -> None:
        """A probe is planned now, `spacing` AR steps after the last: the count to the next one starts again.
        After a fork probe, where the model itself plans AR, the next one comes twice as late, up to PROBE_BACKOFF
        times. Drafted probes keep the budget's spacing: they also renew α̂, and a few unlucky rejections at
        the start need them to recover.
        The count keeps what it held beyond the spacing, up to a probe owed by each other run in flight: runs
        that share the policy end their stretches together, and one of them takes the probe, so zeroing it
        lost the rest (at slope 0 × 16 sync, 12 probes over 64 problems of 12 steps where the budget allowed
        90, and one unlucky early verdict held α̂ low for all of them)."""
        self.ar_rounds = min(max(0, self.ar_rounds - spacing), spacing * (self._concurrency() - 1))
        if fork and not self._model_plan()[0]:
            self._backoff = min(PROBE_BACKOFF, 2 * self._backoff)

    def _drafting_plan(self, depth: int, width: int) -> RoundPlan:
        """A round of γ = `depth` (0: AR). While nothing has priced the draft yet, a γ = 1 round of an engine
        whose target forks is a measuring round: the target writes its own step alone, and the verifier
        judges the draft against it, so that it costs c + j over AR, not c + B(2) + j (the branch after the
        draft would keep a second step only where the draft is accepted)."""
        measuring = depth == 1 and width == 1 and self._forks_itself and self.costs.c() is None
        return RoundPlan(depth, width, measuring=measuring)

    def _stretch_plan(self, seconds_left: float | None, rationed: bool = False) -> RoundPlan:
        """An AR round as the target alone would write it: a stretch (a lone step where none fits)."""
        return RoundPlan(0, stretch_tokens=self._stretch(seconds_left, rationed)[1])

    def _probe_tokens(self) -> int:
        step_tokens = self.costs.step_figures()[0] or PROBE_MIN_TOKENS / PROBE_SHARE
        return max(PROBE_MIN_TOKENS, math.ceil(PROBE_SHARE * step_tokens))

    def _stretch(self, seconds_left: float | None, rationed: bool = False) -> tuple[int, int]:
        """(steps, token cap) of the next AR round, within the stretch limits and the time left; (1, 0) for a
        lone step. At least AR_STRETCH_STEPS steps, more where a request's fixed cost o would otherwise
        exceed STRETCH_OVERHEAD of the stretch (a client short of CPU under many runs: o ≈ a step's time).
        `rationed`: a run the drafting slots left out, which asks again soon: the fewest steps that keep o
        within RATIONED_OVERHEAD (a lone step where o is small)."""
        step_tokens, s_per_token, overhead = self.costs.step_figures()
        if not (step_tokens and s_per_token):
            return 1, 0
        step_s = step_tokens * s_per_token
        overhead = overhead or 0.0
        share, least = (RATIONED_OVERHEAD, 1) if rationed else (STRETCH_OVERHEAD, AR_STRETCH_STEPS)
        most = max(least, math.ceil(overhead * (1.0 - share) / (share * step_s)))
        steps = min(most, max(1, math.floor(AR_STRETCH_SECONDS / step_s + 1e-6)))
        if steps == 1:
            return 1, 0
        tokens = steps * max(1, round(step_tokens))
        if seconds_left is not None:
            tokens = max(1, min(tokens, int(seconds_left / s_per_token)))
        return steps, tokens

    def observe(self, record: RoundRecord) -> None:
        # forgetting is per round of each run (cost_model.per_run): a burst of similar rounds, such as every
        # run's last, does not swamp α
        runs = float(self._concurrency())
        forget = per_run(self.forget, runs)
        # not timed: a run's first round (its request prefills the prompt)
        if record.index and record.target_tokens:
            others = record.target_others or 0.0  # measured while the round's requests were in flight
            if record.target_tokens_all:  # a branch shorter than the longest ran beside it for part of its time
                others += (record.target_tokens_all - record.target_tokens) / record.target_tokens
            self.costs.observe_target(1, record.target_s, record.target_tokens, others, steps=record.target_steps,
                                      runs=runs, server_seconds=record.target_server_s)
        self.costs.observe_draft(record.draft_s, record.draft_steps, runs)
        if not record.depth and not record.probe_tokens:
            with self._lock:
                self.ar_rounds += record.target_steps  # what it wrote: a stretch ends early at EOS
        # a probe's or a measuring round's time says nothing of how fast AR or drafting advance
        timed = record.index and record.output_tokens and record.wall_s > 0
        if timed and not (record.probe_tokens or record.measuring):
            with self._lock:
                if self.client_cpu is not None:
                    self.client_cpu.sample()
                self._time_rate("draft" if record.depth else "ar", record, forget, runs)
                if record.depth:
                    self._ration(record.started)
        self._observe_judge(record, runs)
        if record.positions == 0:
            return
        with self._lock:
            tally = self._tallies.setdefault(record.width, AcceptanceTally())
            tally.add(record.accepted, record.positions - record.accepted, forget, per_run(ALPHA_SLOW_FORGET, runs))
            self.last_width = record.width

    def _observe_judge(self, record: RoundRecord, runs: float) -> None:
        """Time the verifier by the pairs a model answered. Pairs the exact-match fast path accepted cost
        nothing and say nothing of what a judged pair costs: a round that judged none of its pairs is left
        out (on the CPU Qwen pair, a measuring round whose draft equalled the target's step read j = 0
        where the judge costs 0.8 of a step). Where the verifier is exact match alone, its rejections are
        "exact" too: that verifier is free, and such a round says so."""
        judged, exact = record.judged, ExactMatchVerifier.name
        if all(verdict.method == exact and verdict.accept for verdict in judged):
            return
        answered = sum(verdict.method != exact for verdict in judged)
        if self.mode == "async" and self.width == 1:  # one pair at a time: judge_s is the mean over the pairs
            self.costs.observe_judge(1, record.judge_s * len(judged) / max(1, answered), runs)
        else:  # one fork of the pairs the fast path left
            self.costs.observe_judge(max(1, answered), record.judge_s, runs)

    def _time_rate(self, kind: str, record: RoundRecord, forget: float, runs: float) -> None:
        """Add a timed round to the measured rate of its kind ("ar" or "draft"); called under the lock."""
        other = "ar" if kind == "draft" else "draft"
        tokens, seconds = self._rates.get(kind, (0.0, 0.0))
        kept = self._luck_free_tokens(record) if kind == "draft" else record.output_tokens
        weight = forget
        if kind == "draft" and runs <= 1 and self._draft_freshness < STALE_RENEW and seconds > 0:
            # a run's drafted probe after AR rounds: what drafting measured before was at another time (maybe
            # under another load)
            weight = min(forget, STALE_WEIGHT * record.wall_s / seconds)
        self._rates[kind] = (weight * tokens + kept, weight * seconds + record.wall_s)
        self._rounds_timed[kind] = self._rounds_timed.get(kind, 0) + 1
        # what the other kind measured grows stale: its rate stands, but the next round of that kind weighs more
        stale = per_run(STALE_FORGET, runs)
        if other in self._rates:
            self._rates[other] = tuple(stale * value for value in self._rates[other])
        self._draft_freshness = 1.0 if kind == "draft" else self._draft_freshness * stale

    def _luck_free_tokens(self, record: RoundRecord) -> float:
        """The tokens a drafting round counts in the measured rate: what a round of its shape keeps on average
        at α̂, where its time does not depend on its verdicts (a fork: sync, or async windows), so that the
        rates measure what rounds cost and α̂ alone carries acceptance. What it kept where its time grows with
        its luck (the async chain pipeline runs on while accepted) or the end of its problem cut it short."""
        if not self._forks_itself or record.finished or not record.kept:
            return float(record.output_tokens)
        per_step = record.output_tokens / len(record.kept)
        return per_step * round_steps(self.mode, record.depth, min(self.alpha_at(record.width), 0.999), self._window)

    def _ration(self, started: float) -> None:
        """After a timed drafting round that began at `started` (time.perf_counter()): twice the runs may draft
        at once while drafting rounds measure at least GAIN_TO_WIDEN against AR rounds (up to every run), half
        as many once they lose; called under the lock. Only a round that began after every slot was taken
        widens them again: rounds measured among fewer drafting runs say little of more (they get more than
        their share of the client). At slope 0 × 16 async the slots went from 1 to 8 within three rounds of
        one run drafting alone, and then 8 runs drafting γ = 5 at once ran the point at 0.80× AR. Likewise only
        a round that began after the last change narrows them: the rounds in flight end together, and each
        used to halve them, so that one reading of a busy client took 16 slots to 1 within 0.1 s (slope 0 ×
        16 async, 4 of 8 repeats, each then read 1.00–1.16× AR where fixed γ = 4 read 1.5×)."""
        gain = self.measured_gain()
        if gain is None or started < self._slots_changed:
            return
        slots = self.draft_slots
        cores = self._client_cores()
        if gain < GAIN_TO_DRAFT or (cores is not None and cores > CLIENT_CORES_TO_NARROW):
            self.draft_slots = max(1, slots // 2)
        elif gain >= GAIN_TO_WIDEN and started >= self._slots_filled and (cores or 0.0) < CLIENT_CORES_TO_WIDEN:
            self.draft_slots = max(slots, min(2 * slots, self._concurrency()))  # up to the runs in flight now
        if self.draft_slots != slots:
            self._slots_filled = math.inf  # until the new number of runs draft at once
            self._slots_changed = time.perf_counter()

    def _client_cores(self) -> float | None:
        """The client process's CPU over the last second, in cores (None: not watched, or not known yet)."""
        return self.client_cpu.cores() if self.client_cpu is not None else None

    def cost_estimate(self) -> CostEstimate | None:
        estimate = self.costs.estimate(self._concurrency())
        with self._lock:
            depth, width, speedup = self._plan()
            return estimate.model_copy(update={
                "alpha": self.alpha_at(width), "planned_depth": depth, "planned_width": width,
                "measured_gain": self.measured_gain(),
                "draft_slots": self.draft_slots,
                "client_cores": self._client_cores(),
                "expected_speedup": None if math.isnan(speedup) else speedup,
                "width_speedups": {w: round(s, 3) for w, s in self.width_speedups().items()} if self.width > 1 else {},
            })


def make_depth_policy(config: LookaheadConfig, mode: str, costs: CostModel | None = None) -> DepthPolicy:
    """The policy `config` asks for; `costs` lets several engines share what one server set costs."""
    if config.adaptive_depth:
        return AdaptiveDepth(mode, min(config.depth, config.max_depth), config.max_depth, config.width, costs=costs,
                             max_nodes=config.max_tree_nodes, client_cpu=ClientCpu())
    return FixedDepth(config.depth, config.width)
