"""What a round costs on one set of servers, learned online from the rounds themselves.

Times are per token, since steps differ in length, and every estimate forgets at the
same rate so the model follows a change in load.

The target server: its seconds per token grow with the requests it decodes at once,
t(a) = t₁ (1 + s (a − 1)), with s = 0 on an idle GPU (a batch costs one request) and
s ≈ 1 on a CPU or a saturated GPU. Every target request the runs send is an
observation (a = its fork's width plus what the other runs sharing this model have
in flight), and t₁ and s are fitted by forgetting least squares. The branch cost the
theory needs follows: when C runs share the servers and all follow this policy, a
fork of n branches costs

    B(n) = t(C·n) / t(C) = (1 + s (C·n − 1)) / (1 + s (C − 1)),

which is 1 + s (n − 1) for one run, 1 for s = 0, and n for s = 1 at any load: under
load, branches stop being free even on hardware that batches well.

The draft: seconds per drafted token, so c = draft / t₁. The verifier: seconds per
round over B(pairs) (it answers its pairs in one fork, usually on the target's
server), so j(n) = that × B(n) in target steps.

One model may be shared by concurrent runs (`lookahead serve`): it is thread-safe. It
can be saved per server set (`save_costs`, `load_costs`), so that the next
`lookahead run` against the same servers starts from what the last one learned.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from pydantic import BaseModel

from lookahead_reasoning.files import cache_dir, write_atomically

MAX_SLOPE = 1.5
KEEP_SERVER_SETS = 20  # server sets whose costs the cache file keeps


class CostEstimate(BaseModel):
    """The model's current estimates (`stats.cost_model`); None where it has no data yet."""

    target_s_per_token: float | None = None
    branch_cost: dict[int, float] = {}  # B(n) for a few widths n, at `concurrency`
    branch_slope: float | None = None  # s: the target server's extra time per extra concurrent request
    concurrency: float = 1.0  # runs sharing the servers when the estimate was made
    c: float | None = None
    judge_s_per_round: float | None = None  # for one pair (a fork of n pairs costs B(n) times this)
    j: float | None = None  # the same in target steps
    step_tokens: float | None = None
    observations: int = 0
    alpha: float | None = None  # the policy's acceptance estimate
    planned_depth: int | None = None  # the γ it would choose now (0: plain AR)
    expected_speedup: float | None = None  # over AR, by the theory with these costs


class _Average:
    """An exponentially forgetting mean: recent observations weigh more."""

    def __init__(self, forget: float):
        self.forget, self.weight, self.total = forget, 0.0, 0.0

    def state(self) -> list[float]:
        return [self.weight, self.total]

    def restore(self, state: list[float]) -> None:
        self.weight, self.total = float(state[0]), float(state[1])

    def add(self, value: float) -> None:
        self.weight = self.forget * self.weight + 1.0
        self.total = self.forget * self.total + value

    @property
    def value(self) -> float | None:
        return self.total / self.weight if self.weight else None


class CostModel:
    def __init__(self, forget: float = 0.8):
        self.forget = forget
        self._lock = threading.Lock()
        # the target's per-token time y against its concurrent requests minus one, x: forgetting means
        self._x, self._y, self._xx, self._xy = (_Average(forget) for _ in range(4))
        self._alone = _Average(forget)  # y of requests with nothing else in flight (x = 0)
        self._draft = _Average(forget)
        self._judge = _Average(forget)  # seconds per round / B(pairs)
        self._step_tokens = _Average(forget)
        self.observations = 0

    def _averages(self) -> dict[str, _Average]:
        return {"x": self._x, "y": self._y, "xx": self._xx, "xy": self._xy, "alone": self._alone,
                "draft": self._draft, "judge": self._judge, "step_tokens": self._step_tokens}

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

    # -- observations ---------------------------------------------------------------
    def observe_target(self, branches: int, seconds: float, longest_tokens: int, others: float = 0.0) -> None:
        """A fork of `branches` target requests took `seconds`, its longest branch wrote `longest_tokens`,
        while about `others` more target requests were in flight on average (other runs', or a fork
        probe's short branch)."""
        if branches < 1 or seconds <= 0 or longest_tokens < 1:
            return
        x, y = branches - 1 + max(0.0, others), seconds / longest_tokens
        with self._lock:
            for avg, value in ((self._x, x), (self._y, y), (self._xx, x * x), (self._xy, x * y)):
                avg.add(value)
            if x == 0:
                self._alone.add(y)
            self._step_tokens.add(longest_tokens)
            self.observations += 1

    def observe_draft(self, seconds: float, tokens: int) -> None:
        if seconds > 0 and tokens > 0:
            with self._lock:
                self._draft.add(seconds / tokens)

    def observe_judge(self, pairs: int, seconds: float) -> None:
        if pairs > 0 and seconds > 0:
            with self._lock:
                self._judge.add(seconds / self._branch_cost(pairs, 1))

    # -- estimates ------------------------------------------------------------------
    def _fit(self) -> tuple[float | None, float | None]:
        """(t₁, s): the target's seconds per token alone, and its slope; None where the data cannot tell."""
        if self._y.value is None:
            return None, None
        variance = self._xx.value - self._x.value ** 2
        if variance < 1e-9:  # every request saw the same load: no slope yet
            return (self._y.value if self._x.value < 1e-9 else None), None
        b = (self._xy.value - self._x.value * self._y.value) / variance
        t1 = self._y.value - b * self._x.value
        if t1 <= 0:  # noise: take the requests that ran alone, if any
            t1 = self._alone.value or self._y.value
        return t1, min(MAX_SLOPE, max(0.0, b / t1))

    def _branch_cost(self, n: int, concurrency: float) -> float:
        slope = self._fit()[1] or 0.0
        c = max(1.0, concurrency)
        return (1.0 + slope * (c * n - 1.0)) / (1.0 + slope * (c - 1.0))

    def branch_cost(self, n: int, concurrency: float = 1.0) -> float:
        """B(n) when `concurrency` runs share the servers (1 where nothing is known)."""
        with self._lock:
            return self._branch_cost(n, concurrency)

    @property
    def ready(self) -> bool:
        """Enough data to plan with: the target's time alone and its slope, and the draft's time."""
        with self._lock:
            t1, slope = self._fit()
            return t1 is not None and slope is not None and self._draft.value is not None

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

    def c(self) -> float | None:
        with self._lock:
            t1, draft = self._fit()[0], self._draft.value
            return draft / t1 if t1 and draft is not None else None

    def judge_cost(self, pairs: int, concurrency: float = 1.0) -> float:
        """j(pairs): the verifier's time per round in target steps (0 where nothing is known)."""
        with self._lock:
            t1, judge, tokens = self._fit()[0], self._judge.value, self._step_tokens.value
            if not (t1 and judge is not None and tokens):
                return 0.0
            return judge * self._branch_cost(pairs, concurrency) / (t1 * tokens)

    def estimate(self, concurrency: float = 1.0) -> CostEstimate:
        with self._lock:
            t1, slope = self._fit()
            judge, tokens = self._judge.value, self._step_tokens.value
            return CostEstimate(
                target_s_per_token=t1,
                branch_cost={n: round(self._branch_cost(n, concurrency), 3) for n in (2, 3, 5)}
                if slope is not None else {},
                branch_slope=slope,
                c=self._draft.value / t1 if t1 and self._draft.value is not None else None,
                judge_s_per_round=judge,
                j=judge / (t1 * tokens) if t1 and judge is not None and tokens else None,
                step_tokens=tokens,
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
