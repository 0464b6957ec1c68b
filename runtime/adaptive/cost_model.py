"""What a round costs on one set of servers, learned online from the rounds themselves.

The target: a request of L tokens beside x other requests in flight takes T = o + L·(t₁ + u·x) (cost_fit.py
fits it). A step of the mean length L̄ alone takes S = o + L̄·t₁; the slope is s = u·L̄/S, and with C answers
sharing the servers a fork of n branches costs B(n) = (S + L̄·u·(C·n − 1)) / (S + L̄·u·(C − 1)) steps at that
load. A fork ends with its longest branch: with `longest`, its token term is E[the longest of n step lengths]
(step_lengths.py). The draft: c, its seconds per step over the target's step at that load; the verifier: j,
its seconds for one pair over that step, times B(pairs).

Every estimate forgets per round of each answer (`per_answer`). The model is thread-safe (`lookahead serve`
shares it) and saved per server set (`save_costs`, `load_costs`), so a run starts from what the last one
learned. The rules and why: docs/method.md, "Engines, trees and adaptive depth".
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from lookahead_reasoning.files import cache_dir, write_atomically
from lookahead_reasoning.runtime.adaptive.cost_fit import Average, Fit, TargetFit, per_answer
from lookahead_reasoning.runtime.adaptive.tuning import MAX_SLOPE
from lookahead_reasoning.runtime.adaptive.step_lengths import StepLengths
from lookahead_reasoning.runtime.results import CostEstimate

__all__ = ["MAX_SLOPE", "CostModel", "load_costs", "per_answer", "save_costs"]

KEEP_SERVER_SETS = 20  # server sets whose costs the cache file keeps


class CostModel:
    def __init__(self, forget: float = 0.8):
        self.forget = forget
        self._lock = threading.RLock()  # reentrant: the public estimates build on one another
        self._target = TargetFit(forget)
        self._draft_step = Average()  # seconds per drafted step, its request's fixed cost included
        self._judge = Average()  # seconds per round / B(pairs)
        self._lengths = StepLengths()  # what target branches write: a fork waits for its longest
        self.version = 0  # counts every change of what the model knows: what a plan derived from it holds till

    @property
    def observations(self) -> int:
        """Target requests observed."""
        return self._target.observations

    def state(self) -> dict:
        """What the model has learned, as plain data (see `restore`)."""
        with self._lock:
            return {"target": self._target.state(), "draft step": self._draft_step.state(), "judge": self._judge.state(),
                    "step lengths": self._lengths.state()}

    def restore(self, state: dict) -> None:
        """Take up a saved state; a state that does not fit is ignored (the model starts afresh)."""
        target, draft, judge, lengths = TargetFit(self.forget), Average(), Average(), StepLengths()
        try:
            target.restore(state["target"])
            draft.restore(state["draft step"])
            judge.restore(state["judge"])
            lengths.restore(state["step lengths"])
        except (KeyError, TypeError, ValueError, IndexError):
            return
        with self._lock:
            self._target, self._draft_step, self._judge, self._lengths = target, draft, judge, lengths
            self.version += 1

    # -- observations ---------------------------------------------------------------
    def observe_target(
        self, branches: int, seconds: float, longest_tokens: int, others: float = 0.0, steps: int = 1,
        answers: float = 1.0, server_seconds: float | None = None,
    ) -> None:
        """A fork of `branches` target requests took `seconds`, its longest branch wrote `longest_tokens`,
        while about `others` more target requests were in flight on average (other answers', or the fork's
        branches that were shorter than the longest, for the share of its tokens they ran beside it).
        `steps` > 1: a request that wrote that many steps at once (an AR stretch): its time per token
        counts, but not its length as a step's. `answers`: the answers sharing the model (forgetting is per
        round of each answer).
        `server_seconds`: the same as the server timed it, where it says; then the fit is of the server's
        time, and the client's share (`seconds` less it) is a fixed cost of its own."""
        if branches < 1 or seconds <= 0 or longest_tokens < 1:
            return
        timed = server_seconds if server_seconds is not None and 0 < server_seconds else None
        with self._lock:
            self._target.observe(branches - 1 + max(0.0, others), float(longest_tokens), seconds, timed, steps, answers)
            self.version += 1

    def observe_draft(self, seconds: float, steps: int, answers: float = 1.0) -> None:
        """The draft wrote `steps` steps (one request each) in `seconds`. Priced per step, not per token: a
        draft request's fixed cost is most of a short step's time (a step that finishes one capped by the
        token limit can be a token long)."""
        if seconds > 0 and steps > 0:
            with self._lock:
                self._draft_step.add(seconds / steps, per_answer(self.forget, answers), weight=steps)
                self.version += 1

    def observe_step_lengths(self, tokens: list[int]) -> None:
        """What each target branch of a round wrote (tokens): a fork waits for its longest."""
        if tokens:
            with self._lock:
                for n in tokens:
                    self._lengths.add(n)
                self.version += 1

    @property
    def lengths_seen(self) -> int:
        """Step lengths observed in all (restored ones included): the planner reprices replays as it grows."""
        with self._lock:
            return self._lengths.seen

    def step_lengths(self) -> list[int]:
        """The target's recent step lengths (tokens), oldest first: what a replay of the round rules walks."""
        with self._lock:
            return self._lengths.state()

    def observe_verifier(self, pairs: int, seconds: float, answers: float = 1.0) -> None:
        if pairs > 0 and seconds > 0:
            with self._lock:
                self._judge.add(seconds / self.branch_cost(pairs), per_answer(self.forget, answers))
                self.version += 1

    # -- estimates ------------------------------------------------------------------
    def _fit(self) -> Fit:
        return self._target.fit()

    def _step_tokens(self) -> float | None:
        """A target step's mean length: of what its branches wrote, else of the requests the fit has seen."""
        return self._lengths.mean() or self._target.step_tokens

    def _step_s(self, active: float, fit: Fit | None = None, tokens: float | None = None) -> float | None:
        """Seconds of a target step of the mean length (or of `tokens`) while `active` requests decode at once."""
        t1, per_request, overhead = fit or self._fit()
        tokens = tokens or self._step_tokens()
        if t1 is None or tokens is None:
            return None
        return overhead + tokens * (t1 + (per_request or 0.0) * (active - 1.0))

    def _slope(self) -> float | None:
        """s: what one more request in flight adds to a step of the mean length, over that step alone."""
        per_request, alone = self._fit()[1], self._step_s(1.0)
        return None if per_request is None or not alone else per_request * self._step_tokens() / alone

    def branch_cost(self, n: int, concurrency: float = 1.0, longest: bool = False) -> float:
        """B(n) when `concurrency` answers share the servers: n branches of one length over one (1 where nothing
        is known), what `lookahead servers probe` measures. `longest`: what a round's fork of n branches costs,
        which ends with its longest branch, E[the longest of n step lengths] tokens (what the theory prices a
        round's fork at)."""
        with self._lock:
            fit, c = self._fit(), max(1.0, concurrency)
            tokens = self._lengths.longest(n) if longest else None
            alone, forked = self._step_s(c, fit), self._step_s(c * n, fit, tokens=tokens)
            return forked / alone if alone and forked else 1.0

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
            return self._target.alone_unknown

    # c and j are in target steps at the load the plan is for: the theory prices a round against the step AR
    # would take there, as B(n) is (against the step alone, both would read (1 + s(C − 1)) times too high)
    def c(self, concurrency: float = 1.0) -> float | None:
        """The draft's time per step over the target's (a step of the mean length) while `concurrency`
        answers share the servers."""
        return self._in_steps(self._draft_step, concurrency)

    def j(self, concurrency: float = 1.0) -> float | None:
        """The verifier's time for one pair over the target's step, as `c`."""
        return self._in_steps(self._judge, concurrency)

    def _in_steps(self, seconds: Average, concurrency: float) -> float | None:
        """A mean time in target steps of the mean length at that load (None where either is unknown)."""
        with self._lock:
            step, value = self._step_s(max(1.0, concurrency)), seconds.value
            return value / step if step and value is not None else None

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
            j = self.j(concurrency)
            return 0.0 if j is None else j * self.branch_cost(pairs, concurrency)

    def step_figures(self) -> tuple[float | None, float | None, float | None]:
        """(tokens of a step, the target's seconds per token alone, a request's fixed seconds) as `estimate` gives
        them, without building one: the policy asks for them as it plans each round."""
        with self._lock:
            t1, _, overhead = self._fit()
            return self._step_tokens(), t1, overhead if t1 is not None else None

    def estimate(self, concurrency: float = 1.0) -> CostEstimate:
        with self._lock:
            step_tokens, t1, overhead = self.step_figures()
            slope = self._slope()
            known = (2, 3, 5) if slope is not None else ()
            return CostEstimate(
                target_s_per_token=t1,
                request_overhead_s=overhead,
                branch_cost={n: round(self.branch_cost(n, concurrency), 3) for n in known},
                fork_cost={n: round(self.branch_cost(n, concurrency, longest=True), 3) for n in known},
                branch_slope=slope,
                c=self.c(concurrency),
                verify_s_per_round=self._judge.value,
                j=self.j(concurrency),
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
