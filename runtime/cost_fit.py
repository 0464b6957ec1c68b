"""The target's timed requests as weighted rows, and the bounded least squares the cost model fits to them.

A row is one request: i = 1/L (L its tokens), x (the other requests in flight beside it) and y = T/L, its
seconds per token, so that a long request (an AR stretch) weighs as one observation, not as many. Each row
has a weight in two memories, a fast and a slow one: every new row discounts the older ones by each
memory's forgetting, and an outlier counts less from the start (cost_model.py says by how much).

The fit is y ≈ t₁ + o·i + u·x within the model's bounds: t₁ > 0, o ≥ 0, and 0 ≤ u ≤ MAX_SLOPE·(t₁ + o/L̄),
that is a step of the mean length L̄ costs at most MAX_SLOPE more per other request in flight.
`scipy.optimize.lsq_linear` solves it within the box bounds; where its u breaks the slope bound, the
optimum lies on that bound (a convex problem with one more constraint), and it is solved again there,
with u = MAX_SLOPE·(t₁ + o/L̄). o is fitted only where the lengths vary enough, apart from what the loads
explain, to tell it from t₁ and u; else o = 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import lsq_linear

MAX_SLOPE = 1.5
MIN_LENGTH_SPREAD = 0.2  # 1/L varies at least this much (std / mean, apart from the loads) for o to be fitted
MIN_LOAD_SPREAD = 0.05  # the loads vary at least this much (std / mean of 1 + x) for the slope to be fitted
MAX_ROWS = 4096  # rows kept at most; older ones, and those weighing under MIN_ROW_WEIGHT in both memories, go
MIN_ROW_WEIGHT = 1e-9

Fit = tuple[float | None, float | None, float]  # (t₁, u, o); None where the data cannot tell


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

    def __len__(self) -> int:
        return len(self._rows)

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
