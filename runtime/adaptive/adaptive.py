"""The adaptive depth policy: the parts of this package put together behind the `DepthPolicy` protocol.

Each round: the planner proposes (γ, W) from the cost model and α̂; the probe schedule may make it an AR
check, a probe, or an AR stretch; the drafting slots may turn a drafting plan into AR. Each timed round
feeds the cost model, the measured rates, the slots and α̂. One policy may serve concurrent answers
(`lookahead serve`): every part is read and changed under one lock, and forgetting is per round of each answer.
"""

from __future__ import annotations

import math
import threading
import time

from lookahead_reasoning.runtime.adaptive.client_cpu import ClientCpu
from lookahead_reasoning.runtime.adaptive.cost_model import CostModel, per_answer
from lookahead_reasoning.runtime.adaptive.alpha import Acceptance
from lookahead_reasoning.runtime.adaptive.tuning import ALPHA_SLOW_FORGET, GAIN_TO_WIDEN
from lookahead_reasoning.runtime.adaptive.faults import RoleFaults
from lookahead_reasoning.runtime.adaptive.governor import DraftSlots
from lookahead_reasoning.runtime.adaptive.planner import Estimates, Planner
from lookahead_reasoning.runtime.adaptive.probes import ProbeSchedule
from lookahead_reasoning.runtime.adaptive.rates import MeasuredRates
from lookahead_reasoning.runtime.adaptive.round_plan import RoundPlan
from lookahead_reasoning.runtime.adaptive.stretches import ar_step, stretch
from lookahead_reasoning.runtime.adaptive.target_load import TargetLoad
from lookahead_reasoning.runtime.results import CostEstimate, RoundRecord
from lookahead_reasoning.verifiers.base import ExactMatchVerifier
from lookahead_reasoning.verifiers.registry import GATE_METHODS


class AdaptiveDepth:
    def __init__(
        self, mode: str, initial: int, max_depth: int, width: int = 1, forget: float = 0.9,
        costs: CostModel | None = None, max_nodes: int | None = None, client_cpu: ClientCpu | None = None,
        rule: str = "longest",
    ):
        self.forget = forget  # per round of each answer: α̂'s short memory and the measured rates
        self.costs = costs or CostModel()
        self.planner = Planner(mode, width, initial, max_depth, max_nodes, rule)
        self.probes = ProbeSchedule(self.planner)
        self.acceptance = Acceptance()
        self.rates = MeasuredRates()
        self.governor = DraftSlots(client_cpu)
        self.target_load = TargetLoad()  # the target requests in flight across the answers
        self.faults = RoleFaults()
        # draft once (γ = 1) even where the branches alone rule lookahead out, to measure c, j and α for a
        # report (`lookahead demo`); callers that only want the answer fast leave this off
        self.measure_drafting = False
        self._lock = threading.Lock()

    @property
    def mode(self) -> str:
        return self.planner.mode

    @property
    def width(self) -> int:
        return self.planner.width

    @property
    def answers(self) -> int:
        return self.governor.answers

    def answer_started(self) -> None:
        with self._lock:
            self.governor.answer_started()

    def answer_finished(self) -> None:
        with self._lock:
            answer = threading.get_ident()
            self.governor.answer_finished(answer)
            self.probes.release(answer)
            self.faults.release(answer)

    def estimates(self) -> Estimates:
        """What the planner plans from now."""
        answers = self.governor.answers
        return Estimates(self.costs, answers, self.acceptance.alpha_at, ar_step(self.costs, answers),
                         self.rates.gain(), self.measure_drafting)

    def peek_round(self) -> RoundPlan:
        """The plan of a drafting round that may come next (for drafting ahead); γ ≥ 1."""
        with self._lock:
            depth, width, _ = self.planner.plan(self.estimates())
            return RoundPlan(depth or 1, width)

    def next_round(self, seconds_left: float | None = None, first: bool = False) -> RoundPlan:
        """The next round of the answer of this thread; `seconds_left` (a deadline) caps an AR stretch to what
        fits at the target's speed; `first`: the answer's first round, which is not timed."""
        with self._lock:
            answer = threading.get_ident()
            self.probes.release(answer)
            e = self.estimates()
            best = self.planner.plan(e)
            def ar(rationed: bool = False) -> RoundPlan:
                return RoundPlan(0, stretch_tokens=stretch(self.costs, seconds_left, rationed)[1])

            if self.faults.down:  # AR, but for a retry now and then (faults.py)
                retry = self.faults.take_retry(answer, time.perf_counter())
                plan = RoundPlan(best.depth or 1, best.width) if retry else ar()
            else:
                plan = self.probes.next_round(e, best, first, answer, ar)
            if self.governor.admit(answer, drafts=plan.depth > 0):
                return plan
            self.faults.release(answer)
            # the slots are taken: AR, a short stretch where the rates say drafting pays (the slots widen soon)
            return ar(rationed=e.gain is not None and e.gain >= GAIN_TO_WIDEN)

    def observe(self, record: RoundRecord) -> None:
        answers = float(self.governor.answers)
        forget = per_answer(self.forget, answers)
        with self._lock:
            if record.faults:
                self.faults.failed(record.faults, time.perf_counter())
            elif record.depth and self.faults.answered(record.started):
                self.rates = MeasuredRates()  # measured before and during the outage, under another load
        steps = len(record.kept) if record.kind == "stretch" else 1  # steps the longest target request wrote
        if record.index and record.target_tokens:  # an answer's first round is not timed (it prefills the prompt)
            others = record.target_others or 0.0  # measured while the round's requests were in flight
            if record.target_tokens_all:  # a branch shorter than the longest ran beside it for part of its time
                others += (record.target_tokens_all - record.target_tokens) / record.target_tokens
            self.costs.observe_target(1, record.target_s, record.target_tokens, others, steps=steps,
                                      answers=answers, server_seconds=record.target_server_s)
        self.costs.observe_step_lengths(record.branch_tokens)
        if record.faults:  # the draft's and the verifier's times and verdicts measure the fault (faults.py)
            return
        self.costs.observe_draft(record.draft_s, record.draft_steps, answers)
        with self._lock:
            if record.kind in ("ar", "stretch"):
                self.probes.count_ar_steps(steps)  # what it wrote: a stretch ends early at EOS
            # a probe's or a measuring round's time says nothing of how fast AR or drafting advance
            timed = record.index and record.output_tokens and record.wall_s > 0
            if timed and record.kind not in ("probe", "measuring"):
                self.governor.sample_client()
                kind = "draft" if record.depth else "ar"
                self.rates.add(kind, self._counted_tokens(record), record.wall_s, forget, answers)
                if record.depth:
                    self.governor.drafting_round_timed(record.started, self.rates.gain())
        self._observe_verifier(record, answers)
        if record.positions:
            with self._lock:
                self.acceptance.add(record.width, record.accepted, record.positions - record.accepted, forget,
                                    per_answer(ALPHA_SLOW_FORGET, answers))

    def _counted_tokens(self, record: RoundRecord) -> float:
        """The tokens a timed round counts in the measured rates: for a drafting round of a forking engine
        (its time does not depend on its verdicts), what a round of its shape keeps on average at α̂; else,
        or where the end of its problem cut it short, what it kept."""
        if not record.depth or not self.planner.forks_itself or record.finished or not record.kept:
            return float(record.output_tokens)
        per_step = record.output_tokens / len(record.kept)
        return per_step * self.planner.round_steps(record.depth, min(self.acceptance.alpha_at(record.width), 0.999))

    def _observe_verifier(self, record: RoundRecord, answers: float) -> None:
        """Time the verifier by the pairs a model answered: pairs the exact-match fast path accepted and pairs
        a gate rejected cost nothing and say nothing of a judged pair, so a round that judged none is
        left out. Where the verifier is exact match alone, its rejections are "exact" too: that verifier is
        free, and such a round says so."""
        judged, exact = record.judged, ExactMatchVerifier.name

        def free(verdict) -> bool:
            return (verdict.method == exact and verdict.accept) or verdict.method in GATE_METHODS

        if all(free(verdict) for verdict in judged):
            return
        answered = sum(verdict.method not in (exact, *GATE_METHODS) for verdict in judged)
        if self.mode == "async" and self.width == 1:  # one pair at a time: verify_s is the mean over the pairs
            self.costs.observe_verifier(1, record.verify_s * len(judged) / max(1, answered), answers)
        elif record.judge_calls > 1:  # streamed: pairs judged as their branches ended, a few per call
            calls = record.judge_calls
            self.costs.observe_verifier(max(1, round(answered / calls)), record.verify_s / calls, answers)
        else:  # one fork of the pairs the fast path and the gate left
            self.costs.observe_verifier(max(1, answered), record.verify_s, answers)

    def cost_estimate(self) -> CostEstimate | None:
        estimate = self.costs.estimate(self.governor.answers)
        with self._lock:
            e = self.estimates()
            depth, width, speedup = self.planner.plan(e)
            return estimate.model_copy(update={
                "alpha": self.acceptance.alpha_at(width), "planned_depth": depth, "planned_width": width,
                "measured_gain": e.gain,
                "draft_slots": self.governor.slots,
                "client_cores": self.governor.client_cores(),
                "expected_speedup": None if math.isnan(speedup) else speedup,
                "width_speedups": {w: round(s, 3) for w, s in self.planner.width_speedups(e).items()}
                if self.width > 1 else {},
            })
