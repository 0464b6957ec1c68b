"""Step-level pipelining for the async engine with a chain draft (W = 1).

This is the schedule the paper's asynchronous analysis describes. The draft writes
d_1, d_2, … one after another without waiting for verification, staying at most γ
steps ahead of the last verified step. As soon as d_i exists (and is complete), the
target starts t_i, its own step after d_1..d_i, as a separate request; the target
step t_0 after the bare prefix starts at once. Verification walks in order: d_i is
judged against t_{i−1} as soon as both exist. An accepted step costs about the
draft's time (c); a rejection costs one target step, after which everything in
flight is discarded and a new round starts from the new prefix.

A round ends at a rejection (t_{i−1} is kept), after an accepted step that ended on
EOS or the length cap, or at the token budget. Results of discarded requests are
ignored when they arrive.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from lookahead_reasoning.programs.step_types import StepOutput
from lookahead_reasoning.runtime.errors import target_failed
from lookahead_reasoning.runtime.results import JudgedDraft, StepRecord


class ChainPipeline:
    """The in-flight state of one round: drafts and target steps, keyed by position."""

    def __init__(self, models, pool: ThreadPoolExecutor, prefix: str, depth: int, cap: int):
        self.models = models
        self.pool = pool
        self.prefix = prefix
        self.depth = depth
        self.cap = cap
        self.lock = threading.Condition()
        self.verified = 0  # draft steps accepted so far this round
        self.cancelled = False
        self.drafts: dict[int, Future] = {}  # i -> Future[StepOutput | None]; None: there is no d_i
        self.targets: dict[int, Future] = {}  # i -> Future[StepOutput]: the target's step after d_1..d_i
        self.draft_times: list[float] = []
        self.target_times: list[float] = []
        self.draft_error: BaseException | None = None
        self._launch_target(0, "")
        if depth > 0:
            pool.submit(self._drafter)
        else:
            self._future(self.drafts, 1).set_result(None)

    def _future(self, table: dict[int, Future], i: int) -> Future:
        with self.lock:
            return table.setdefault(i, Future())

    def _launch_target(self, i: int, continuation: str) -> None:
        future = self._future(self.targets, i)

        def work():
            t0 = time.perf_counter()
            try:
                [step] = self.models.target(self.prefix, [continuation], self.cap)
            except BaseException as error:
                future.set_exception(error)
                return
            self.target_times.append(time.perf_counter() - t0)
            future.set_result(step)

        self.pool.submit(work)

    def _drafter(self) -> None:
        text, i = "", 1
        try:
            while True:
                with self.lock:
                    while not self.cancelled and i - self.verified > self.depth:
                        self.lock.wait()
                    if self.cancelled:
                        return
                t0 = time.perf_counter()
                [step] = self.models.draft(self.prefix + text, 1, self.cap)
                self.draft_times.append(time.perf_counter() - t0)
                if self.cancelled:
                    return
                text += step.text
                if step.complete:
                    self._launch_target(i, text)
                self._future(self.drafts, i).set_result(step)
                i += 1
                if not step.complete:
                    return
        except BaseException as error:
            self.draft_error = error
        finally:
            future = self._future(self.drafts, i)
            if not future.done():
                future.set_result(None)

    def draft(self, i: int) -> StepOutput | None:
        return self._future(self.drafts, i).result()

    def target(self, i: int) -> StepOutput:
        return self._future(self.targets, i).result()

    def advance(self, verified: int) -> None:
        with self.lock:
            self.verified = verified
            self.lock.notify_all()

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            self.lock.notify_all()


def run_chain_round(engine, run, depth: int, cap: int, pool: ThreadPoolExecutor):
    """One pipelined round; returns (kept records, kept outputs, judged records, pipeline, judge seconds)."""
    pipe = ChainPipeline(engine.models, pool, run.prefix, depth, cap)
    kept: list[StepRecord] = []
    outputs: list[StepOutput] = []
    judged: list[JudgedDraft] = []
    judge_s = 0.0
    budget = engine.config.max_tokens - run.stats.output_tokens
    index = len(run.log)

    def keep(step: StepOutput, source: str, score: float | None = None) -> None:
        kept.append(StepRecord(text=step.text, source=source, verifier_score=score, round=index))
        outputs.append(step)
        engine.announce(kept[-1])

    i = 1
    try:
        while True:
            try:
                t_prev = pipe.target(i - 1)
            except Exception as error:
                raise target_failed(error) from None
            run.stats.target.add(t_prev.prompt_tokens, t_prev.completion_tokens, t_prev.cached_tokens)
            if not run.log and i == 1:
                run.stats.prompt_tokens = t_prev.prompt_tokens  # t_0 of the first round: the bare prompt
            d = pipe.draft(i)
            if d is None:
                keep(t_prev, "target")
                break
            run.stats.draft.add(d.prompt_tokens, d.completion_tokens, d.cached_tokens)
            t0 = time.perf_counter()
            [verdict] = engine.judge(run, [(t_prev.text, d.text)])
            judge_s += time.perf_counter() - t0
            judged.append(JudgedDraft(draft=d.text, target=t_prev.text, accept=verdict.accept,
                                      score=verdict.score, method=verdict.method))
            if not (verdict.accept and d.ending == t_prev.ending):
                keep(t_prev, "target")
                break
            keep(d, "draft", verdict.score)
            pipe.advance(i)
            budget -= max(1, d.completion_tokens)
            if not d.complete or budget <= 0 or not run.drafting:
                break
            i += 1
    finally:
        pipe.cancel()
    if pipe.draft_error is not None:
        run.draft_failed(pipe.draft_error)
    return kept, outputs, judged, pipe, judge_s
