"""What a round costs on one set of servers, learned online from the rounds themselves.

Times are per token, since steps differ in length, and every estimate forgets at the
same rate so the model follows a change in load:

- the target alone: seconds per token of one target step with no sibling branches,
  measured by plain (AR) rounds;
- a fork of n target branches: seconds per token of its longest branch f(n), so that
  B(n) = f(n) / alone. B is modelled as a line, B(n) = 1 + s(n − 1) (s = 0 on an idle
  GPU, s ≈ 1 on a CPU), with one slope fitted over forks of every width: a fork of any
  width updates what every width costs, so the model follows load with whatever
  widths the policy happens to run;
- the draft: seconds per drafted token, so c = draft / alone;
- the verifier: seconds per round, scaled by B like the target's fork (the judge
  answers its pairs in one fork, usually on the target's server), so j(n) is in
  target steps.

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
    branch_cost: dict[int, float] = {}  # B(n) for a few widths n
    branch_slope: float | None = None  # s in B(n) = 1 + s(n - 1)
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
        self._alone = _Average(forget)
        # s = f(n) / (alone (n - 1)) - 1 / (n - 1), averaged: two averages make it exact for any later `alone`
        self._fork_per_width = _Average(forget)  # f(n) / (n - 1)
        self._inverse_width = _Average(forget)  # 1 / (n - 1)
        self._draft = _Average(forget)
        self._judge = _Average(forget)  # seconds per round / B(pairs)
        self._step_tokens = _Average(forget)
        self.observations = 0

    def _averages(self) -> dict[str, _Average]:
        return {"alone": self._alone, "fork_per_width": self._fork_per_width, "inverse_width": self._inverse_width,
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
    def observe_target(self, branches: int, seconds: float, longest_tokens: int) -> None:
        """A fork of `branches` target requests took `seconds`; its longest branch wrote `longest_tokens`."""
        if branches < 1 or seconds <= 0 or longest_tokens < 1:
            return
        with self._lock:
            per_token = seconds / longest_tokens
            if branches == 1:
                self._alone.add(per_token)
            else:
                self._fork_per_width.add(per_token / (branches - 1))
                self._inverse_width.add(1.0 / (branches - 1))
            self._step_tokens.add(longest_tokens)
            self.observations += 1

    def observe_draft(self, seconds: float, tokens: int) -> None:
        if seconds > 0 and tokens > 0:
            with self._lock:
                self._draft.add(seconds / tokens)

    def observe_judge(self, pairs: int, seconds: float) -> None:
        if pairs > 0 and seconds > 0:
            with self._lock:
                self._judge.add(seconds / self._branch_cost(pairs))

    # -- estimates ------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """Enough data to plan with: the target alone, a fork, and the draft."""
        return None not in (self._alone.value, self._fork_per_width.value, self._draft.value)

    @property
    def target_alone_unknown(self) -> bool:
        """No lone target step measured yet: an AR round would tell."""
        return self._alone.value is None

    def _slope(self) -> float | None:
        alone, fork = self._alone.value, self._fork_per_width.value
        if not alone or fork is None:
            return None
        return min(MAX_SLOPE, max(0.0, fork / alone - self._inverse_width.value))

    def _branch_cost(self, n: int) -> float:
        slope = self._slope()
        return 1.0 + (slope or 0.0) * max(0, n - 1)

    def branch_cost(self, n: int) -> float:
        """B(n): a fork of n target branches over one target step (1 where nothing is known)."""
        with self._lock:
            return self._branch_cost(n)

    def c(self) -> float | None:
        with self._lock:
            alone, draft = self._alone.value, self._draft.value
            return draft / alone if alone and draft is not None else None

    def judge_cost(self, pairs: int) -> float:
        """j(pairs): the verifier's time per round in target steps (0 where nothing is known)."""
        with self._lock:
            alone, judge, tokens = self._alone.value, self._judge.value, self._step_tokens.value
            if not (alone and judge is not None and tokens):
                return 0.0
            return judge * self._branch_cost(pairs) / (alone * tokens)

    def estimate(self) -> CostEstimate:
        with self._lock:
            alone = self._alone.value
            return CostEstimate(
                target_s_per_token=alone,
                branch_cost={n: round(self._branch_cost(n), 3) for n in (2, 3, 5)} if self._slope() is not None else {},
                branch_slope=self._slope(),
                c=self._draft.value / alone if alone and self._draft.value is not None else None,
                judge_s_per_round=self._judge.value,
                j=self._judge.value / (alone * self._step_tokens.value)
                if alone and self._judge.value is not None and self._step_tokens.value else None,
                step_tokens=self._step_tokens.value,
                observations=self.observations,
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
