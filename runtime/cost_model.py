"""What a round costs on one set of servers, learned online from the rounds themselves.

Steps differ in length, so times are modelled per token, and every estimate forgets at
the same rate so the model follows a change in load. The rate is per round of each run:
where C runs share the model, an observation discounts the past by forget^(1/C), so
that the memory spans the same few rounds of every run at any concurrency (per
observation, 64 runs would keep less than a round of each, and the last burst of
similar rounds, such as every run's final one, would swamp the estimates).

The target server: a request of L tokens takes T = o + L·(t₁ + u (a − 1)), a fixed cost o
(HTTP, scheduling, the prefill of the last step), a time per token alone t₁, and u, what
each other request the server decodes at once adds per token: u = 0 on an idle GPU (a
batch costs one request), u ≈ t₁ on a CPU or a saturated GPU. Every timed target request
the runs send is an observation (a = its fork's width plus what the other runs sharing
this model have in flight), and o, t₁ and u are fitted, each ≥ 0, by forgetting least
squares per token: of T/L on (1, 1/L, a − 1), within the bounds (s ≤ MAX_SLOPE) and, where the
recent loads barely vary, with the time alone from a slower fit (`_least_squares`); a request far from what
the fit predicts counts less (a stall of the server is not a slope: `_inlier_weight`). Without o, short
steps would look slower per token than long ones, and that noise would swamp u; o is fitted only where
requests' lengths vary enough, apart from what their loads explain, to tell it from t₁ and u. Where
the server reports its own time for a request (SGLang's `e2e_latency`), that is what is fitted, and the
client's share of a request (HTTP, the frontend's threads: its time less the server's) is a forgetting
mean added to o: a client short of CPU under many runs takes longer per request the more requests it
has in flight, which a fit of its timings reads as slope (traced in `bench --load` at 4 runs on 2
cores: s = 1.0 on a server that batches for free, and every run stayed at AR where drafting gained
1.3×). For a step of L̄ tokens (the mean) alone, S = o + L̄ t₁, the slope s = u L̄ / S is what one more
request in flight adds to it (s ≈ 1: linear). The
branch cost the theory needs follows: when C runs share the servers and all follow this
policy, a fork of n branches costs

    B(n) = (S + L̄ u (C·n − 1)) / (S + L̄ u (C − 1)),

which is 1 + s (n − 1) for one run, 1 for s = 0, and about n for s = 1 at any load:
under load, branches stop being free even on hardware that batches well. B depends on o
and t₁ only through S, which the data pins down even where it cannot split it.

The draft: seconds per drafted step (its request's fixed cost included), so c = draft / S. The verifier:
seconds per round over B(pairs) (it answers its pairs in one fork, usually on the
target's server), so j(n) = that × B(n) in target steps.

One model may be shared by concurrent runs (`lookahead serve`): it is thread-safe. It
can be saved per server set (`save_costs`, `load_costs`), so that the next
`lookahead run` against the same servers starts from what the last one learned.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from lookahead_reasoning.files import cache_dir, write_atomically

MAX_SLOPE = 1.5
TIE = 1e-9  # fits whose mean squared errors differ by less than this times ȳ² fit equally well
# 1/L varies at least this much (std / mean, apart from what the loads explain) for a fixed cost o to be fitted
MIN_LENGTH_SPREAD = 0.2
SLOW_FORGET = 0.98  # per round of each run: the fit that the time alone comes from where the load barely varies
MIN_LOAD_SPREAD = 0.05  # requests' loads vary at least this much, std / mean of (1 + x), for the slope to be fitted
MAX_SLOPE_ERROR = 0.1  # the slope's standard error (in s) under which a fit over barely varying loads is trusted
MOMENTS = ("1*i", "1*x", "i*i", "i*x", "x*x", "1*y", "i*y", "x*y", "y*y")  # of y = T/L on (1, i = 1/L, x); 1*1 is 1
KEEP_SERVER_SETS = 20  # server sets whose costs the cache file keeps
# outliers' weights (see `_inlier_weight`): a request whose time per token lies more than INLIER_SCALES times the
# typical residual from the fit counts (that / its residual)² as much; the typical residual is at least
# RESIDUAL_FLOOR of the prediction, forgets RESIDUAL_FORGET per round of each run (faster than the fit, so that a
# change that lasts soon becomes typical), and each residual moves it by at most RESIDUAL_CLIP times itself
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
        # least squares of a request's seconds per token y = T/L on (1, 1/L, x), L its tokens, x the other
        # requests in flight: forgetting means of the products the normal equations need
        self._moments = {name: _Average() for name in MOMENTS}
        self._slow_moments = {name: _Average() for name in MOMENTS}  # the same, forgetting at SLOW_FORGET
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
        self._fitted: tuple[float | None, float | None, float] | None = None  # `_fit`, until a target observation

    def _averages(self) -> dict[str, _Average]:
        return {**self._moments, **{f"slow {name}": avg for name, avg in self._slow_moments.items()},
                "alone": self._alone, "residual": self._residual, "client": self._client,
                "server timed": self._server_timed, "draft step": self._draft_step, "judge": self._judge,
                "step_tokens": self._step_tokens, "measured slope": self._measured_slope}

    def state(self) -> dict:
        """What the model has learned, as plain data (see `restore`)."""
        with self._lock:
            return {name: avg.state() for name, avg in self._averages().items()} | {"observations": self.observations}

    def restore(self, state: dict) -> None:
        """Take up a saved state; a state that does not fit is ignored (the model starts afresh)."""
        try:
            parsed = {name: [float(x) for x in state[name]][:2] for name in self._averages()}
            observations = int(state.get("observations", 0))
        except (KeyError, TypeError, ValueError):
            return
        with self._lock:
            for name, avg in self._averages().items():
                avg.restore(parsed[name])
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
        r = {"1": 1.0, "i": 1.0 / tokens, "x": x, "y": (timed or seconds) / tokens}
        forget, slow = per_run(self.forget, runs), per_run(SLOW_FORGET, runs)
        with self._lock:
            weight = self._inlier_weight(x, tokens, r["y"], timed is not None, per_run(RESIDUAL_FORGET, runs))
            if timed is not None:
                self._client.add(max(0.0, seconds - timed), forget)
            self._server_timed.add(float(timed is not None), slow)
            for name in MOMENTS:
                a, b = name.split("*")
                self._moments[name].add(r[a] * r[b], forget, weight)
                self._slow_moments[name].add(r[a] * r[b], slow, weight)
            if x == 0:
                self._alone.add(r["y"], forget)
            if steps == 1:
                self._step_tokens.add(longest_tokens, forget)
            self.observations += 1
            self._refit(runs)
            self.version += 1

    def observe_draft(self, seconds: float, steps: int, runs: float = 1.0) -> None:
        """The draft wrote `steps` steps (one request each) in `seconds`. Priced per step, not per token: a
        draft request's fixed cost is most of a short step's time (a step that finishes one capped by the
        token limit can be a token long), and per token such steps read c several times too high."""
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
        one. A stall, the server held up for a moment, slows every request in flight at once, and more of them
        are in flight than usual (they pile up), so at full weight it reads as a slope: in `bench --load` at
        slope 0 × 16 async, one 0.15 s stall (requests beside 38 to 53 others at 2.5 times their time per token,
        the rest beside 25 to 35 at theirs) priced B(2) at 1.77 and turned the 16 drafting runs to AR, and in
        another run the slower tail of a busy machine's requests held B(2) at 1.13 for most of the run (replayed
        with these weights: 1.05 and 1.04). A change that lasts is followed all the same, a round or two of each
        run later: each residual moves the typical one by up to RESIDUAL_CLIP times it."""
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
    def _fit(self) -> tuple[float | None, float | None, float]:
        """(t₁, u, o): the target's seconds per token alone, the extra seconds per token per extra request
        in flight, and a request's fixed seconds (the client's share included);
        None where the data cannot tell. Solved once per target observation: a plan asks for it often."""
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
        """Least squares of the seconds per token y = t₁ + o/L + u·x, per token so that a long request (an AR
        stretch) weighs as one observation, not as many: an error in its x would otherwise swamp the fit.
        Returns (t₁, u, o, whether these data measured u).

        The fit is local (it forgets fast), a linearisation around the current load. Where the requests'
        loads barely vary next to the load itself (`MIN_LOAD_SPREAD`: every request beside about 64 others,
        or every recent round a fork of one width), the slope would be fitted from a few per cent of their
        time, less than what a loaded client adds to timing a request. The time alone, t₁ and o, then comes
        from the slowly forgetting fit (`SLOW_FORGET`), which has seen lighter load (the AR checks between
        forks, the ends of waves of requests), and u from the local level (from that fit too where the local
        load is under one other request: one run's AR stretches after a probe). Where neither fit sees the
        load vary (a probe's single fork has faded behind many AR stretches), the slope is the one last
        measured (`_measured_slope`), so that free branches stay free between probes; where none was ever
        measured, linear (s = 1), the safe side: AR until a probe measures it."""
        m = self._values(self._moments)
        if m is None:
            return None, None, 0.0, False
        sloped = self._load_variance(m) >= 1e-9
        if not sloped and m["1*x"] >= 1e-9:  # every request saw the same load, and not alone
            return None, None, 0.0, False
        if sloped and self._slope_measured(m, self._moments):
            return *self._constrained(m, True), True
        slow = self._values(self._slow_moments)
        t1, per_request, overhead = (self._constrained(slow, True) if self._slope_measured(slow, self._slow_moments)
                                     else (None, None, 0.0))
        if t1 is None:
            remembered = self._measured_slope.value
            if not sloped and remembered is None:  # every request alone and no slope measured yet: a probe tells
                return *self._constrained(m, False), False
            return *self._constrained(m, True, slope=1.0 if remembered is None else remembered), False
        if m["1*x"] < 1.0:  # beside less than one other request on average, the level says little about u
            return t1, per_request, overhead, True
        per_request = (m["1*y"] - t1 - overhead * m["1*i"]) / m["1*x"]
        return t1, min(max(0.0, per_request), self._bound(m, t1, overhead)), overhead, True

    @staticmethod
    def _values(moments: dict[str, _Average]) -> dict[str, float] | None:
        values = {name: avg.value for name, avg in moments.items()}
        return None if values["1*y"] is None else values

    @classmethod
    def _covariance(cls, m: dict[str, float], a: str, b: str) -> float:
        """The forgetting-weighted covariance of the regressors `a` and `b` (1, i or x; y for the time)."""
        return cls._moment(m, a, b) - cls._moment(m, "1", a) * cls._moment(m, "1", b)

    @classmethod
    def _load_variance(cls, m: dict[str, float]) -> float:
        return cls._covariance(m, "x", "x")

    @classmethod
    def _load_spread(cls, m: dict[str, float]) -> bool:
        """Whether the requests' loads varied enough to fit the slope from them."""
        return cls._load_variance(m) >= MIN_LOAD_SPREAD ** 2 * (1.0 + m["1*x"]) ** 2

    @classmethod
    def _lengths_vary(cls, m: dict[str, float]) -> bool:
        """Whether the requests' lengths varied enough to tell a fixed cost o from the time per token, and from
        the slope: only the spread of 1/L that the loads do not explain counts. A short fork probe between
        long lone steps is slower per token by o/L and by u alike; fitting o there (the lone steps' noise
        reading o = 5 s) read free branches where they cost two steps (traced on the CPU Qwen pair)."""
        spread = cls._covariance(m, "i", "i")
        load_variance = cls._load_variance(m)
        if load_variance > 1e-12:
            spread -= cls._covariance(m, "i", "x") ** 2 / load_variance
        return spread >= MIN_LENGTH_SPREAD ** 2 * m["1*i"] ** 2

    def _slope_measured(self, m: dict[str, float], moments: dict[str, _Average]) -> bool:
        """Whether the slope can be fitted from these moments: the loads varied enough, or, where they barely
        did (many runs always in flight, and fork probes whose short branch adds a quarter of a request), the
        times were steady enough that the slope's standard error is under MAX_SLOPE_ERROR, and it does not
        fall with the load. The error assumes noise independent of the load: only where the recent
        requests were all timed by the server; a client slows with the requests it has in flight."""
        if self._load_spread(m):
            return True
        if (self._server_timed.value or 0.0) < 1.0 - 1e-9:  # a client's noise may line up with the load
            return False
        slope, error = self._plain_slope(m, moments["1*y"].weight)
        return error <= MAX_SLOPE_ERROR and slope >= -MAX_SLOPE_ERROR

    def _plain_slope(self, m: dict[str, float], count: float) -> tuple[float, float]:
        """The slope s of the ordinary least squares of y on (1, x, and 1/L where the lengths vary), unbounded,
        and its standard error, from the moments of `count` (forgetting-weighted) observations; (nan, inf)
        where they cannot tell."""
        unknown = math.nan, math.inf
        names = ["1", "x"] + (["i"] if self._lengths_vary(m) else [])
        if count <= len(names):
            return unknown
        matrix = np.array([[self._moment(m, a, b) for b in names] for a in names])
        vector = np.array([self._moment(m, a, "y") for a in names])
        try:
            inverse = np.linalg.inv(matrix)
        except np.linalg.LinAlgError:
            return unknown
        theta = inverse @ vector
        residual = max(0.0, m["y*y"] - float(theta @ vector)) * count / (count - len(names))  # per observation
        variance = residual / count * inverse[1, 1]
        tokens = self._mean_tokens(m)
        alone = tokens * theta[0] + (theta[2] if len(names) == 3 else 0.0)  # a mean step alone, seconds
        if not (variance >= 0 and alone > 0):
            return unknown
        return theta[1] * tokens / alone, math.sqrt(variance) * tokens / alone

    def _mean_tokens(self, m: dict[str, float]) -> float:
        return self._step_tokens.value or 1.0 / m["1*i"]

    def _bound(self, m: dict[str, float], t1: float, overhead: float) -> float:
        """u where a step of the mean length costs MAX_SLOPE more per other request in flight."""
        return MAX_SLOPE * (overhead / self._mean_tokens(m) + t1)

    def _constrained(self, m: dict[str, float], sloped: bool, slope: float | None = None,
                     ) -> tuple[float | None, float | None, float]:
        """The least squares under the model's bounds: every coefficient ≥ 0 (they are costs), t₁ > 0, and
        s ≤ MAX_SLOPE; with `slope`, s fixed at it. The constrained optimum is the unconstrained one on some
        face of that region, so it fits each face (each set of free regressors with the slope's bound slack,
        and the bound binding) and keeps the best feasible fit. The bound binds where time per token grows
        faster with the load than in proportion (u = 0 with t₁ the whole time is then the best fit that
        leaves it slack: branches free)."""
        # o is told apart from t₁ only by requests of different lengths; where they are nearly one length,
        # o and t₁ trade off freely (a t₁ near 0 and a noisy slope): o is left out (o = 0)
        separable = self._lengths_vary(m)
        mean_tokens = self._mean_tokens(m)

        def bound_face(slope: float) -> list[list[dict[str, float]]]:
            """t₁ (and o) free, u = slope·(t₁ + o/L̄); without o, and with it where it can be fitted."""
            face = [{"1": 1.0, "x": slope}, {"i": 1.0, "x": slope / mean_tokens}]
            return [face[:1], face] if separable else [face[:1]]

        if slope is not None:
            faces = [(face, True) for face in bound_face(slope)]
        else:
            optional = (["x"] if sloped else []) + (["i"] if separable else [])
            faces = [([{"1": 1.0}, *({name: 1.0} for name in extra)], False)  # t₁ always free; the bound slack
                     for size in range(len(optional) + 1) for extra in itertools.combinations(optional, size)]
            faces += [(face, True) for face in bound_face(MAX_SLOPE)] if sloped else []
        fits = [(self._solve(m, face), binding) for face, binding in faces]
        feasible = [(theta, binding) for theta, binding in fits if theta["1"] > 0 and theta["i"] >= 0
                    and 0 <= theta["x"] <= self._bound(m, theta["1"], theta["i"]) * (1 + 1e-9)]
        # t₁ alone (or t₁ on a fixed slope) is feasible whenever the data came from `observe_target` (y > 0)
        if not feasible:
            return None, None, 0.0
        losses = [self._loss(m, theta) for theta, _ in feasible]
        tie = min(losses) + TIE * m["1*y"] ** 2
        # where the data cannot tell a fixed cost from the slope (the first probe beside one other request: both
        # fit exactly, and float noise picked one), take the slope: pessimistic about branches, the safe side;
        # the bound only where it fits better
        theta, _ = min((fit for fit, loss in zip(feasible, losses) if loss <= tie),
                       key=lambda fit: (fit[1], fit[0]["x"] == 0))
        return theta["1"], (min(self._bound(m, theta["1"], theta["i"]), theta["x"]) if sloped else None), theta["i"]

    @staticmethod
    def _moment(m: dict[str, float], a: str, b: str) -> float:
        return 1.0 if a == b == "1" else m[f"{a}*{b}"] if f"{a}*{b}" in m else m[f"{b}*{a}"]

    @classmethod
    def _solve(cls, m: dict[str, float], face: list[dict[str, float]]) -> dict[str, float]:
        """Least squares of y on the directions of `face` (each a combination of the regressors 1, i, x), from
        the moments; the coefficients of the regressors (0 for one no direction uses)."""
        def moment(d: dict[str, float], e: dict[str, float]) -> float:
            return sum(d[a] * e[b] * cls._moment(m, a, b) for a in d for b in e)

        matrix = np.array([[moment(d, e) for e in face] for d in face])
        vector = np.array([moment(d, {"y": 1.0}) for d in face])
        weights = np.linalg.lstsq(matrix, vector, rcond=None)[0].tolist()
        return {name: sum(w * d.get(name, 0.0) for w, d in zip(weights, face)) for name in ("1", "i", "x")}

    @classmethod
    def _loss(cls, m: dict[str, float], theta: dict[str, float]) -> float:
        """The mean squared residual of `theta`, less the mean of y² (the same for every fit)."""
        quadratic = sum(theta[a] * theta[b] * cls._moment(m, a, b) for a in theta for b in theta)
        return quadratic - 2.0 * sum(value * cls._moment(m, name, "y") for name, value in theta.items())

    def _step_s(self, active: float, fit: tuple[float | None, float | None, float] | None = None) -> float | None:
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
    # would take there (B(n) is relative to it too); against the step alone, both read (1 + s(C − 1)) times
    # too high under C runs (1.3× at s = 0.1 and four runs, where drafting then looked no better than AR)
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
