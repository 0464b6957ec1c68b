"""The target's time per request, fitted from the timed requests: T = o + L·(t₁ + u·x) (see cost_model.py).

A row is one request: i = 1/L, x (the other requests in flight beside it) and y = T/L, so that a long request
weighs as one observation. Each row weighs in a fast and a slow memory, and an outlier counts less from the
start (`TargetFit._inlier_weight`: a stall of the server is not a slope). The fit is y ≈ t₁ + o·i + u·x with
t₁ > 0, o ≥ 0 and 0 ≤ u ≤ MAX_SLOPE·(t₁ + o/L̄), solved by `scipy.optimize.lsq_linear` and, where u breaks
the slope bound, again on that bound. o is fitted only where the lengths vary enough, apart from what the
loads explain. `TargetFit._least_squares` chooses the memory and the fit to trust.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import lsq_linear

from lookahead_reasoning.runtime.adaptive.tuning import (
    FIT_BEFORE_WEIGHTS, FIT_SLOW_FORGET, INLIER_SCALES, MAX_SLOPE, MAX_SLOPE_ERROR, MIN_LENGTH_SPREAD,
    MIN_LOAD_SPREAD, RESIDUAL_CLIP, RESIDUAL_FLOOR, RESIDUAL_FORGET,
)

MAX_ROWS = 4096  # rows kept at most; older ones, and those weighing under MIN_ROW_WEIGHT in both memories, go
MIN_ROW_WEIGHT = 1e-9
SAVED_ROWS = 512  # the most recent rows a saved state keeps

Fit = tuple[float | None, float | None, float]  # (t₁, u, o); None where the data cannot tell


def per_answer(forget: float, answers: float) -> float:
    """One observation's discount of the past where `answers` answers share an estimate: `forget` per round
    of each answer, so that a memory spans the same rounds of every answer at any concurrency."""
    return forget ** (1.0 / max(1.0, answers))


class Average:
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


@dataclass(frozen=True)
class Sample:
    """One memory's view of the rows: weights normalised to sum to 1, and `count`, their sum before (how
    many observations the memory holds)."""

    i: np.ndarray
    x: np.ndarray
    y: np.ndarray
    w: np.ndarray
    count: float

    def mean(self, values: np.ndarray) -> float:
        return float(self.w @ values)

    def cov(self, a: np.ndarray, b: np.ndarray) -> float:
        return self.mean(a * b) - self.mean(a) * self.mean(b)

    @property
    def load_variance(self) -> float:
        return self.cov(self.x, self.x)

    @property
    def load_spread(self) -> bool:
        """The loads varied enough to fit the slope from them."""
        return self.load_variance >= MIN_LOAD_SPREAD ** 2 * (1.0 + self.mean(self.x)) ** 2

    @property
    def lengths_vary(self) -> bool:
        """The lengths varied enough to tell o from t₁ and from the slope: only the spread of 1/L that the
        loads do not explain counts (a short fork probe among long lone steps is slower per token by o/L and
        by u alike, and reading that as o prices branches free)."""
        spread, load_variance = self.cov(self.i, self.i), self.load_variance
        if load_variance > 1e-12:
            spread -= self.cov(self.i, self.x) ** 2 / load_variance
        return spread >= MIN_LENGTH_SPREAD ** 2 * self.mean(self.i) ** 2

    def plain_slope(self, mean_tokens: float) -> tuple[float, float]:
        """The slope s = u·L̄/(o + L̄·t₁) of the ordinary least squares of y on (1, x, and i where the lengths
        vary), unbounded, and its standard error; (nan, inf) where the rows cannot tell."""
        unknown = math.nan, math.inf
        columns = [np.ones_like(self.x), self.x] + ([self.i] if self.lengths_vary else [])
        if self.count <= len(columns):
            return unknown
        a = np.column_stack(columns)
        matrix, vector = a.T @ (self.w[:, None] * a), a.T @ (self.w * self.y)
        try:
            inverse = np.linalg.inv(matrix)
        except np.linalg.LinAlgError:
            return unknown
        theta = inverse @ vector
        residual = max(0.0, self.mean(self.y * self.y) - float(theta @ vector)) * self.count / (self.count - len(columns))
        variance = residual / self.count * inverse[1, 1]
        alone = mean_tokens * theta[0] + (theta[2] if len(columns) == 3 else 0.0)  # a mean step alone, seconds
        if not (variance >= 0 and alone > 0):
            return unknown
        return theta[1] * mean_tokens / alone, math.sqrt(variance) * mean_tokens / alone

    def fit(self, mean_tokens: float, sloped: bool, slope: float | None = None) -> Fit:
        """(t₁, u, o) within the bounds (see the module docstring); u None where not `sloped` (every row at
        one load); with `slope`, s fixed at it: u = slope·(t₁ + o/L̄). (None, None, 0) where no fit has t₁ > 0."""
        with_o = self.lengths_vary
        if slope is None:
            columns = [np.ones_like(self.x)] + ([self.x] if sloped else []) + ([self.i] if with_o else [])
            theta = self._solve(columns)
            t1, u, o = theta[0], theta[1] if sloped else 0.0, theta[-1] if with_o else 0.0
            if not sloped or u <= MAX_SLOPE * (t1 + o / mean_tokens) * (1 + 1e-9):
                return (t1, u if sloped else None, o) if t1 > 0 else (None, None, 0.0)
            slope = MAX_SLOPE
        # on the slope: y = t₁·(1 + slope·x) + o·(i + slope·x/L̄)
        columns = [1.0 + slope * self.x] + ([self.i + slope * self.x / mean_tokens] if with_o else [])
        theta = self._solve(columns)
        t1, o = theta[0], theta[1] if with_o else 0.0
        return (t1, slope * (t1 + o / mean_tokens), o) if t1 > 0 else (None, None, 0.0)

    def _solve(self, columns: list[np.ndarray]) -> list[float]:
        """The weighted least squares of y on `columns`, every coefficient ≥ 0."""
        root = np.sqrt(self.w)
        a = np.column_stack(columns) * root[:, None]
        return lsq_linear(a, self.y * root, bounds=(0.0, np.inf), method="bvls").x.tolist()


class Rows:
    """The timed target requests, each with its weight in the fast and the slow memory."""

    def __init__(self) -> None:
        self._rows = np.empty((0, 3))  # i, x, y
        self._weights = np.empty((0, 2))  # fast, slow

    def add(self, tokens: float, x: float, y: float, weight: float, forget: float, slow_forget: float) -> None:
        """A request of `tokens` tokens beside `x` others at `y` seconds per token, counting `weight`; the
        rows before it are discounted by `forget` (fast memory) and `slow_forget` (slow memory)."""
        weights = np.vstack([self._weights * (forget, slow_forget), (weight, weight)])
        rows = np.vstack([self._rows, (1.0 / tokens, x, y)])
        keep = weights.max(axis=1) >= MIN_ROW_WEIGHT
        keep[:-MAX_ROWS] = False
        keep[-1] = True
        self._rows, self._weights = rows[keep], weights[keep]

    def sample(self, slow: bool = False) -> Sample | None:
        """The fast (or slow) memory's view; None where it holds nothing."""
        weights = self._weights[:, int(slow)]
        total = float(weights.sum())
        if not total > 0:
            return None
        i, x, y = self._rows.T
        return Sample(i, x, y, weights / total, total)

    def state(self) -> list[list[float]]:
        return np.hstack([self._rows, self._weights]).tolist()

    def restore(self, state: list[list[float]]) -> None:
        table = np.array(state, dtype=float).reshape(-1, 5)
        if not np.all(np.isfinite(table)):
            raise ValueError("rows that are not numbers")
        self._rows, self._weights = table[:, :3], table[:, 3:]


class TargetFit:
    """The target's time per request, T = o + L·(t₁ + u·x), fitted from every timed target request; not
    thread-safe (the cost model holds its lock)."""

    def __init__(self, forget: float) -> None:
        self.forget = forget
        self._rows = Rows()  # the timed target requests, in a fast (`forget`) and a slow (FIT_SLOW_FORGET) memory
        self._alone = Average()  # seconds per token of requests with nothing else in flight (x = 0)
        self._residual = Average()  # the typical |residual| of a request's seconds per token from the fit
        self._client = Average()  # a request's seconds in the client beyond the server's own time
        self._server_timed = Average()  # the share of requests timed by the server, forgetting slowly
        self._step_tokens = Average()  # tokens of a step (requests that wrote one)
        self._measured_slope = Average()  # s as the fits measured it, forgetting slowly: where the data cannot tell
        self.observations = 0
        self._fitted: Fit | None = None  # `fit()`, until the next observation

    def _averages(self) -> dict[str, Average]:
        return {"alone": self._alone, "residual": self._residual, "client": self._client,
                "server timed": self._server_timed, "step tokens": self._step_tokens,
                "measured slope": self._measured_slope}

    def state(self) -> dict:
        return ({name: avg.state() for name, avg in self._averages().items()}
                | {"requests": self._rows.state()[-SAVED_ROWS:], "observations": self.observations})

    def restore(self, state: dict) -> None:
        """Take up a saved state; ValueError (or KeyError, TypeError) where it does not fit, and nothing changes."""
        rows = Rows()
        parsed = {name: [float(x) for x in state[name]][:2] for name in self._averages()}
        rows.restore(state["requests"])
        observations = int(state["observations"])
        for name, avg in self._averages().items():
            avg.restore(parsed[name])
        self._rows, self.observations, self._fitted = rows, observations, None

    @property
    def alone_unknown(self) -> bool:
        """No request has been timed with nothing else in flight, and the fit cannot tell t₁."""
        return self.fit()[0] is None and self._alone.value is None

    @property
    def step_tokens(self) -> float | None:
        return self._step_tokens.value

    def observe(self, x: float, tokens: float, seconds: float, server_seconds: float | None, steps: int,
                answers: float) -> None:
        """A request of `tokens` tokens beside `x` others took `seconds` (`server_seconds` by the server's own
        clock, where it says); `steps`: the steps it wrote; `answers`: the answers sharing the model."""
        y = (server_seconds or seconds) / tokens
        forget, slow = per_answer(self.forget, answers), per_answer(FIT_SLOW_FORGET, answers)
        weight = self._inlier_weight(x, tokens, y, server_seconds is not None, per_answer(RESIDUAL_FORGET, answers))
        if server_seconds is not None:
            self._client.add(max(0.0, seconds - server_seconds), forget)
        self._server_timed.add(float(server_seconds is not None), slow)
        self._rows.add(tokens, x, y, weight, forget, slow)
        if x == 0:
            self._alone.add(y, forget)
        if steps == 1:
            self._step_tokens.add(tokens, forget)
        self.observations += 1
        self._refit(answers)

    def _inlier_weight(self, x: float, tokens: float, y: float, server_timed: bool, forget: float) -> float:
        """The weight of a request's time per token `y` in the fit: 1 within INLIER_SCALES typical residuals of
        what the fit predicts at its load, (that limit / its residual)² beyond; and its residual moves the typical
        one. A stall (the server held up for a moment) slows every request in flight at once, and more of them
        are in flight than usual, so at full weight it reads as a slope. A change that lasts is followed all
        the same, a round or two of each answer later: each residual moves the typical one by up to RESIDUAL_CLIP
        times it."""
        if self.observations < FIT_BEFORE_WEIGHTS:
            return 1.0
        t1, per_request, overhead = self.fit()
        if t1 is None:
            return 1.0
        client = (self._client.value or 0.0) if server_timed else 0.0  # the fit's o holds the client's share
        predicted = t1 + max(0.0, overhead - client) / tokens + (per_request or 0.0) * x
        residual = abs(y - predicted)
        typical = max(self._residual.value or 0.0, RESIDUAL_FLOOR * predicted)
        self._residual.add(min(residual, RESIDUAL_CLIP * typical), forget)
        limit = INLIER_SCALES * typical
        return 1.0 if residual <= limit else (limit / residual) ** 2

    def fit(self) -> Fit:
        """(t₁, u, o): the target's seconds per token alone, the extra seconds per token per extra request
        in flight, and a request's fixed seconds (the client's share included); None where the data cannot
        tell. Solved once per target observation: a plan asks for it often."""
        if self._fitted is None:
            t1, per_request, overhead, _ = self._least_squares()
            self._fitted = t1, per_request, overhead + (self._client.value or 0.0)
        return self._fitted

    def _refit(self, answers: float) -> None:
        """Solve the fit after a target observation, and remember the slope s where these data measured it."""
        t1, per_request, overhead, measured = self._least_squares()
        self._fitted = t1, per_request, overhead + (self._client.value or 0.0)
        tokens = self._step_tokens.value
        if measured and t1 is not None and per_request is not None and tokens:
            self._measured_slope.add(per_request * tokens / (overhead + tokens * t1), per_answer(FIT_SLOW_FORGET, answers))

    def _least_squares(self) -> tuple[float | None, float | None, float, bool]:
        """(t₁, u, o, whether these data measured u): the recent fit where its loads tell the slope; else t₁
        and o from the slow fit where its loads do, and u from the recent level (from the slow fit too where the
        recent load is under one other request, whose level says little of u); else the slope last measured, or
        linear (s = 1, the safe side until a fork probe measures it) where none was."""
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
        (many answers always in flight), the times were steady enough that the slope's standard error is under
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
