"""What a round costs on one set of servers, learned online from the rounds themselves.

The target: a request of L tokens beside x other requests in flight takes T = o + L·(t₁ + u·x): a fixed
cost o (HTTP, scheduling, the last step's prefill), a time per token alone t₁, and u, what each other
request adds per token (0 where a batch costs one request, about t₁ where it does not). A step of the mean
length L̄ alone takes S = o + L̄·t₁, and the slope is s = u·L̄/S. When C runs share the servers, a fork of n
branches costs B(n) = (S + L̄·u·(C·n − 1)) / (S + L̄·u·(C − 1)) target steps at that load: 1 + s(n − 1) for
one run. The draft: c, its seconds per step (fixed cost included) over the target's step at that load. The
verifier: j(n), its seconds per round of one pair over that step, times B(n).

Rules (cost_fit.py holds the least squares itself):
- Every estimate forgets at `forget` per round of each run: where C runs share the model, an observation
  discounts the past by forget^(1/C) (`per_run`), so that the memory spans the same rounds at any load.
- Where the server reports its own time for a request, that is what is fitted; the client's share (its time
  less the server's) is a separate mean added to o, since a client short of CPU slows with its load.
- o is fitted only where the lengths vary enough to tell it from t₁ and u.
- The slope is fitted where the recent loads vary enough, or where the server's own times are steady enough
  that its standard error is small. Else the time alone comes from a slower fit, which has seen lighter
  load, and u from the recent level; where neither can tell, the slope last measured holds, and where none
  was, it is linear (s = 1): the safe side until a fork probe measures it.
- A request far from what the fit predicts counts less (`_inlier_weight`): a stall of the server is not a slope.

One model may be shared by concurrent runs (`lookahead serve`): it is thread-safe. It is saved per server set
(`save_costs`, `load_costs`), so the next run against the same servers starts from what the last learned; a
saved state that does not fit is ignored.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from pydantic import BaseModel

from lookahead_reasoning.files import cache_dir, write_atomically
from lookahead_reasoning.runtime.cost_fit import MAX_SLOPE, Fit, Rows, Sample

__all__ = ["MAX_SLOPE", "CostEstimate", "CostModel", "load_costs", "per_run", "save_costs"]

SLOW_FORGET = 0.98  # per round of each run: the slower fit, which the time alone comes from where loads barely vary
MAX_SLOPE_ERROR = 0.1  # the slope's standard error (in s) under which a fit over barely varying loads is trusted
KEEP_SERVER_SETS = 20  # server sets whose costs the cache file keeps
SAVED_ROWS = 512  # the most recent target requests a saved state keeps
# outliers (see `_inlier_weight`): a request whose time per token lies more than INLIER_SCALES typical residuals
# from the fit counts (that / its residual)² as much; the typical residual is at least RESIDUAL_FLOOR of the
# prediction, forgets RESIDUAL_FORGET per round of each run (faster than the fit, so that a change that lasts
# soon becomes typical), and each residual moves it by at most RESIDUAL_CLIP times itself
INLIER_SCALES = 2.0
RESIDUAL_FLOOR = 0.05
RESIDUAL_FORGET = 0.5
RESIDUAL_CLIP = 3.0
FIT_BEFORE_WEIGHTS = 10  # observations before the fit weighs them


class CostEstimate(BaseModel):
    """The model's current estimates (`stats.cost_model`); None where it has no data yet."""

    target_s_per_token: float | None = None
    request_overhead_s: float | None = None  # o: a target request's fixed seconds, the client's share included
    branch_cost: dict[int, float] = {}  # B(n) for a few widths n, at `concurrency`
    branch_slope: float | None = None  # s: a mean step's extra time per extra concurrent request, over its time alone
    concurrency: float = 1.0  # runs sharing the servers when the estimate was made
    c: float | None = None  # the draft's time per step over the target's, at `concurrency`
    judge_s_per_round: float | None = None  # for one pair (a fork of n pairs costs B(n) times this)
    j: float | None = None  # the same in target steps, at `concurrency`
    step_tokens: float | None = None
    observations: int = 0
    alpha: float | None = None  # the policy's acceptance estimate
    planned_depth: int | None = None  # the γ it would choose now (0: plain AR)
    planned_width: int | None = None  # the W it would choose now
    width_speedups: dict[int, float] = {}  # with --width W > 1: the best expected speedup at each width
    expected_speedup: float | None = None  # over AR, by the theory with these costs at the plan's α (depth.py)
    measured_gain: float | None = None  # tokens/s of the rounds that drafted over that of AR rounds, measured
    draft_slots: int | None = None  # how many of the runs sharing the policy may be in a drafting round at once
    client_cores: float | None = None  # the CPU the client process used over the last second, in cores (depth.py)


def per_run(forget: float, runs: float) -> float:
    """One observation's discount of the past where `runs` runs share an estimate: `forget` per round of
    each run (see the module docstring)."""
    return forget ** (1.0 / max(1.0, runs))


class _Average:
    """An exponentially forgetting mean: recent observations weigh more."""

    def __init__(self) -> None:
        self.weight, self.total = 0.0, 0.0

    def state(self) -> list[float]:
        return [self.weight, self.total]

    def restore(self, state: list[float]) -> None:
        self.weight, self.total = float(state[0]), float(state[1])

    def add(self, value: float, forget: float, weight: float = 1.0) -> None:
        """`value`, counting `weight` times, discounting what came before by `forget`."""
        self.weight = forget * self.weight + weight
        self.total = forget * self.total + weight * value

    @property
    def value(self) -> float | None:
        return self.total / self.weight if self.weight else None


class CostModel:
    def __init__(self, forget: float = 0.8):
        self.forget = forget
        self._lock = threading.Lock()
        self._rows = Rows()  # the timed target requests, in a fast (`forget`) and a slow (SLOW_FORGET) memory
        self._alone = _Average()  # seconds per token of requests with nothing else in flight (x = 0)
        self._residual = _Average()  # the typical |residual| of a request's seconds per token from the fit
        self._client = _Average()  # a target request's seconds in the client beyond the server's own time
        self._server_timed = _Average()  # the share of target requests timed by the server, forgetting slowly
        self._draft_step = _Average()  # seconds per drafted step, its request's fixed cost included
        self._judge = _Average()  # seconds per round / B(pairs)
        self._step_tokens = _Average()
        self._measured_slope = _Average()  # s as the fits measured it, forgetting slowly: where the data cannot tell
        self.observations = 0
        self.version = 0  # counts every change of what the model knows: what a plan derived from it holds till
        self._fitted: Fit | None = None  # `_fit`, until a target observation

    def _averages(self) -> dict[str, _Average]:
        return {"alone": self._alone, "residual": self._residual, "client": self._client,
                "server timed": self._server_timed, "draft step": self._draft_step, "judge": self._judge,
                "step_tokens": self._step_tokens, "measured slope": self._measured_slope}

    def state(self) -> dict:
        """What the model has learned, as plain data (see `restore`)."""
        with self._lock:
            return ({name: avg.state() for name, avg in self._averages().items()}
                    | {"target requests": self._rows.state()[-SAVED_ROWS:], "observations": self.observations})

    def restore(self, state: dict) -> None:
        """Take up a saved state; a state that does not fit is ignored (the model starts afresh)."""
        rows = Rows()
        try:
            parsed = {name: [float(x) for x in state[name]][:2] for name in self._averages()}
            rows.restore(state["target requests"])
            observations = int(state.get("observations", 0))
        except (KeyError, TypeError, ValueError):
            return
        with self._lock:
            for name, avg in self._averages().items():
                avg.restore(parsed[name])
            self._rows = rows
            self.observations = observations
            self._fitted = None
            self.version += 1

    # -- observations ---------------------------------------------------------------
    def observe_target(
        self, branches: int, seconds: float, longest_tokens: int, others: float = 0.0, steps: int = 1,
        runs: float = 1.0, server_seconds: float | None = None,
    ) -> None:
        """A fork of `branches` target requests took `seconds`, its longest branch wrote `longest_tokens`,
        while about `others` more target requests were in flight on average (other runs', or the fork's
        branches that were shorter than the longest, for the share of its tokens they ran beside it).
        `steps` > 1: a request that wrote that many steps at once (an AR stretch): its time per token
        counts, but not its length as a step's. `runs`: the runs sharing the model (forgetting is per run's round).
        `server_seconds`: the same as the server timed it, where it says; then the fit is of the server's
        time, and the client's share (`seconds` less it) is a fixed cost of its own."""
        if branches < 1 or seconds <= 0 or longest_tokens < 1:
            return
        timed = server_seconds if server_seconds is not None and 0 < server_seconds else None
        x, tokens = branches - 1 + max(0.0, others), float(longest_tokens)
        y = (timed or seconds) / tokens
        forget, slow = per_run(self.forget, runs), per_run(SLOW_FORGET, runs)
        with self._lock:
            weight = self._inlier_weight(x, tokens, y, timed is not None, per_run(RESIDUAL_FORGET, runs))
            if timed is not None:
                self._client.add(max(0.0, seconds - timed), forget)
            self._server_timed.add(float(timed is not None), slow)
            self._rows.add(tokens, x, y, weight, forget, slow)
            if x == 0:
                self._alone.add(y, forget)
            if steps == 1:
                self._step_tokens.add(longest_tokens, forget)
            self.observations += 1
            self._refit(runs)
            self.version += 1

    def observe_draft(self, seconds: float, steps: int, runs: float = 1.0) -> None:
        """The draft wrote `steps` steps (one request each) in `seconds`. Priced per step, not per token: a
        draft request's fixed cost is most of a short step's time (a step that finishes one capped by the
        token limit can be a token long)."""
        if seconds > 0 and steps > 0:
            with self._lock:
                self._draft_step.add(seconds / steps, per_run(self.forget, runs), weight=steps)
                self.version += 1

    def observe_judge(self, pairs: int, seconds: float, runs: float = 1.0) -> None:
        if pairs > 0 and seconds > 0:
            with self._lock:
                self._judge.add(seconds / self._branch_cost(pairs, 1), per_run(self.forget, runs))
                self.version += 1

    def _inlier_weight(self, x: float, tokens: float, y: float, server_timed: bool, forget: float) -> float:
        """The weight of a request's time per token `y` in the fit: 1 within INLIER_SCALES typical residuals of
        what the fit predicts at its load, (that limit / its residual)² beyond; and its residual moves the typical
        one. A stall (the server held up for a moment) slows every request in flight at once, and more of them
        are in flight than usual, so at full weight it reads as a slope. A change that lasts is followed all
        the same, a round or two of each run later: each residual moves the typical one by up to RESIDUAL_CLIP
        times it."""
        if self.observations < FIT_BEFORE_WEIGHTS:
            return 1.0
        t1, per_request, overhead = self._fit()
        if t1 is None:
            return 1.0
        client = (self._client.value or 0.0) if server_timed else 0.0  # the fit's o holds the client's share
        predicted = t1 + max(0.0, overhead - client) / tokens + (per_request or 0.0) * x
        residual = abs(y - predicted)
        typical = max(self._residual.value or 0.0, RESIDUAL_FLOOR * predicted)
        self._residual.add(min(residual, RESIDUAL_CLIP * typical), forget)
        limit = INLIER_SCALES * typical
        return 1.0 if residual <= limit else (limit / residual) ** 2

    # -- estimates ------------------------------------------------------------------
    def _fit(self) -> Fit:
        """(t₁, u, o): the target's seconds per token alone, the extra seconds per token per extra request
        in flight, and a request's fixed seconds (the client's share included); None where the data cannot
        tell. Solved once per target observation: a plan asks for it often."""
        if self._fitted is None:
            t1, per_request, overhead, _ = self._least_squares()
            self._fitted = t1, per_request, overhead + (self._client.value or 0.0)
        return self._fitted

    def _refit(self, runs: float) -> None:
        """Solve the fit after a target observation, and remember the slope s where these data measured it."""
        t1, per_request, overhead, measured = self._least_squares()
        self._fitted = t1, per_request, overhead + (self._client.value or 0.0)
        tokens = self._step_tokens.value
        if measured and t1 is not None and per_request is not None and tokens:
            self._measured_slope.add(per_request * tokens / (overhead + tokens * t1), per_run(SLOW_FORGET, runs))

    def _least_squares(self) -> tuple[float | None, float | None, float, bool]:
        """(t₁, u, o, whether these data measured u), by the rules of the module docstring: the recent fit
        where its loads tell the slope; else t₁ and o from the slow fit where its loads do, and u from the
        recent level (from the slow fit too where the recent load is under one other request, whose level
        says little of u); else the slope last measured, or linear where none was."""
        recent = self._rows.sample()
        if recent is None:
            return None, None, 0.0, False
        tokens = self._mean_tokens(recent)
        sloped = recent.load_variance >= 1e-9
        if not sloped and recent.mean(recent.x) >= 1e-9:  # every request saw the same load, and not alone
            return None, None, 0.0, False
        if sloped and self._slope_measured(recent, tokens):
            return *recent.fit(tokens, True), True
        slow = self._rows.sample(slow=True)
        slow_tokens = self._mean_tokens(slow)
        t1, per_request, overhead = (slow.fit(slow_tokens, True) if self._slope_measured(slow, slow_tokens)
                                     else (None, None, 0.0))
        if t1 is None:
            remembered = self._measured_slope.value
            if not sloped and remembered is None:  # every request alone and no slope measured yet: a probe tells
                return *recent.fit(tokens, False), False
            return *recent.fit(tokens, True, slope=1.0 if remembered is None else remembered), False
        load = recent.mean(recent.x)
        if load < 1.0:
            return t1, per_request, overhead, True
        per_request = (recent.mean(recent.y) - t1 - overhead * recent.mean(recent.i)) / load
        return t1, min(max(0.0, per_request), MAX_SLOPE * (t1 + overhead / tokens)), overhead, True

    def _slope_measured(self, sample: Sample, tokens: float) -> bool:
        """Whether the slope can be fitted from `sample`: its loads varied enough, or, where they barely did
        (many runs always in flight), the times were steady enough that the slope's standard error is under
        MAX_SLOPE_ERROR and it does not fall with the load. The error assumes noise independent of the load:
        only where the recent requests were all timed by the server (a client slows with its load)."""
        if sample.load_spread:
            return True
        if (self._server_timed.value or 0.0) < 1.0 - 1e-9:
            return False
        slope, error = sample.plain_slope(tokens)
        return error <= MAX_SLOPE_ERROR and slope >= -MAX_SLOPE_ERROR

    def _mean_tokens(self, sample: Sample) -> float:
        return self._step_tokens.value or 1.0 / sample.mean(sample.i)

    def _step_s(self, active: float, fit: Fit | None = None) -> float | None:
        """Seconds of a target step of the mean length while `active` requests decode at once."""
        t1, per_request, overhead = fit or self._fit()
        tokens = self._step_tokens.value
        if t1 is None or tokens is None:
            return None
        return overhead + tokens * (t1 + (per_request or 0.0) * (active - 1.0))

    def _slope(self) -> float | None:
        """s: what one more request in flight adds to a step of the mean length, over that step alone."""
        per_request, alone = self._fit()[1], self._step_s(1.0)
        return None if per_request is None or not alone else per_request * self._step_tokens.value / alone

    def _branch_cost(self, n: int, concurrency: float) -> float:
        fit = self._fit()
        c = max(1.0, concurrency)
        alone, forked = self._step_s(c, fit), self._step_s(c * n, fit)
        return forked / alone if alone and forked else 1.0

    def branch_cost(self, n: int, concurrency: float = 1.0) -> float:
        """B(n) when `concurrency` runs share the servers (1 where nothing is known)."""
        with self._lock:
            return self._branch_cost(n, concurrency)

    @property
    def ready(self) -> bool:
        """Enough data to plan with: the target's time alone and its slope, and the draft's time."""
        with self._lock:
            t1, per_request, _ = self._fit()
            return t1 is not None and per_request is not None and self._draft_step.value is not None

    @property
    def slope_known(self) -> bool:
        """Target requests were timed at different loads, so what an extra branch costs is known."""
        with self._lock:
            return self._fit()[1] is not None

    @property
    def target_alone_unknown(self) -> bool:
        """No target request has been timed yet at the least load: an AR round would tell."""
        with self._lock:
            return self._fit()[0] is None and self._alone.value is None

    # c and j are in target steps at the load the plan is for: the theory prices a round against the step AR
    # would take there, as B(n) is (against the step alone, both would read (1 + s(C − 1)) times too high)
    def _c(self, concurrency: float) -> float | None:
        step, draft = self._step_s(max(1.0, concurrency)), self._draft_step.value
        return draft / step if step and draft is not None else None

    def _j(self, concurrency: float) -> float | None:
        step, judge = self._step_s(max(1.0, concurrency)), self._judge.value
        return judge / step if step and judge is not None else None

    def c(self, concurrency: float = 1.0) -> float | None:
        """The draft's time per step over the target's (a step of the mean length) while `concurrency` runs
        share the servers."""
        with self._lock:
            return self._c(concurrency)

    def request_share(self, concurrency: float = 1.0) -> float:
        """A target request's fixed cost o over the time of a step of the mean length (0 where unknown):
        what one more request costs where a stretch would have written its step."""
        with self._lock:
            fit = self._fit()
            step = self._step_s(max(1.0, concurrency), fit)
            return fit[2] / step if step else 0.0

    def judge_cost(self, pairs: int, concurrency: float = 1.0) -> float:
        """j(pairs): the verifier's time per round in target steps (0 where nothing is known)."""
        with self._lock:
            j = self._j(concurrency)
            return 0.0 if j is None else j * self._branch_cost(pairs, concurrency)

    def step_figures(self) -> tuple[float | None, float | None, float | None]:
        """(tokens of a step, the target's seconds per token alone, a request's fixed seconds) as `estimate` gives
        them, without building one: the policy asks for them as it plans each round."""
        with self._lock:
            return self._step_figures()

    def _step_figures(self) -> tuple[float | None, float | None, float | None]:
        t1, _, overhead = self._fit()
        return self._step_tokens.value, t1, overhead if t1 is not None else None

    def estimate(self, concurrency: float = 1.0) -> CostEstimate:
        with self._lock:
            step_tokens, t1, overhead = self._step_figures()
            slope = self._slope()
            return CostEstimate(
                target_s_per_token=t1,
                request_overhead_s=overhead,
                branch_cost={n: round(self._branch_cost(n, concurrency), 3) for n in (2, 3, 5)}
                if slope is not None else {},
                branch_slope=slope,
                c=self._c(concurrency),
                judge_s_per_round=self._judge.value,
                j=self._j(concurrency),
                step_tokens=step_tokens,
                observations=self.observations,
                concurrency=concurrency,
            )


def costs_path() -> Path:
    return cache_dir() / "costs.json"


def load_costs(key: str, forget: float = 0.8, path: Path | None = None) -> CostModel:
    """The cost model saved for the server set `key`, or a new one (also when the file is unreadable)."""
    model = CostModel(forget)
    try:
        saved = json.loads((path or costs_path()).read_text()).get(key)
    except (OSError, ValueError, AttributeError):
        saved = None
    if isinstance(saved, dict):
        model.restore(saved)
    return model


def save_costs(key: str, model: CostModel, path: Path | None = None) -> None:
    """Save `model` for the server set `key`; failing to save only loses what it learned."""
    path = path or costs_path()
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    data.pop(key, None)
    data[key] = model.state()  # the most recent last; only the last KEEP_SERVER_SETS are kept
    data = dict(list(data.items())[-KEEP_SERVER_SETS:])
    try:
        write_atomically(path, json.dumps(data, indent=2))
    except OSError:
        pass
