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
EOS or the length cap, or at the token budget: the rule of acceptance.py, applied as
the pairs arrive. Results of discarded requests are ignored when they arrive.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from lookahead_reasoning.programs.step_types import StepOutput
from lookahead_reasoning.runtime.acceptance import AcceptanceWalk
from lookahead_reasoning.runtime.branches import Branch, new_branch, supports_streaming
from lookahead_reasoning.runtime.adaptive.depth import TargetLoad
from lookahead_reasoning.errors import target_failed
from lookahead_reasoning.runtime.results import JudgedDraft


class ChainPipeline:
    """The in-flight state of one round: drafts and target steps, keyed by position."""

    def __init__(self, models, pool: ThreadPoolExecutor, prefix: str, depth: int, cap: int, load: TargetLoad):
        self.models = models
        self.pool = pool
        self.load = load  # the policy's TargetLoad: other answers' measurements see these requests
        self.prefix = prefix
        self.depth = depth
        self.cap = cap
        self.lock = threading.Condition()
        self.verified = 0  # draft steps accepted so far this round
        self.cancelled = False
        self.drafts: dict[int, Future] = {}  # i -> Future[StepOutput | None]; None: there is no d_i
        self.targets: dict[int, Future] = {}  # i -> Future[StepOutput]: the target's step after d_1..d_i
        self.draft_times: list[float] = []
        self.draft_tokens: list[int] = []
        self.target_times: list[float] = []
        self.target_server_times: list[float | None] = []  # the same as the server timed them, where it says
        self.target_tokens: list[int] = []
        self.target_others: list[float] = []  # target requests in flight beside each (its siblings included)
        self.draft_error: BaseException | None = None
        self.streams = supports_streaming(models)  # target steps as branches that a rejection aborts
        self.branches: dict[int, Branch] = {}
        self.draft_spans: list[tuple[float, float, int]] = []  # (start, end, tokens) of each drafted step
        self.judge_calls: list[tuple[float, float, int]] = []  # (start, end, pairs)
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
                with self.load.track(1) as load:
                    if self.streams:
                        branch = new_branch(self.models, self.prefix, continuation)
                        with self.lock:
                            self.branches[i] = branch
                            if self.cancelled:
                                branch.fate = "aborted"
                        step = branch.run(self.cap)
                    else:
                        [step] = self.models.target(self.prefix, [continuation], self.cap)
            except BaseException as error:
                future.set_exception(error)
                return
            self.target_others.append(load.others)
            self.target_times.append(time.perf_counter() - t0)
            self.target_server_times.append(step.server_s)
            self.target_tokens.append(step.completion_tokens)
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
                self.draft_tokens.append(step.completion_tokens)
                self.draft_spans.append((t0, time.perf_counter(), step.completion_tokens))
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
        """End the round: nothing more is drafted or sent, and target branches still running are aborted."""
        with self.lock:
            self.cancelled = True
            self.lock.notify_all()
            running = [b for b in self.branches.values() if not b.done()]
        for branch in running:
            branch.abort()


def run_chain_round(engine, state, walk: AcceptanceWalk, depth: int, cap: int, pool: ThreadPoolExecutor):
    """One pipelined round, fed position by position to `walk` (the acceptance rule, acceptance.py).

    Returns (judged records, pipeline, judge seconds); the kept steps are in `walk`.
    """
    pipe = ChainPipeline(engine.models, pool, state.prefix, depth, cap, engine.policy.target_load)
    judged: list[JudgedDraft] = []
    verify_s = 0.0
    i = 1
    try:
        while True:
            try:
                t_prev = pipe.target(i - 1)
            except Exception as error:
                raise target_failed(error) from None
            state.metrics.count_tokens("target", [t_prev])  # t_0 of the first round gives the run's prompt tokens
            d = pipe.draft(i)
            if d is None:  # nothing drafted at this position: the target's step is kept
                walk.close(t_prev)
                break
            state.metrics.count_tokens("draft", [d])
            t0 = time.perf_counter()
            [verdict] = engine.verify(state, [(t_prev.text, d.text)])
            pipe.judge_calls.append((t0, time.perf_counter(), 1))
            verify_s += time.perf_counter() - t0
            judged.append(JudgedDraft(draft=d.text, target=t_prev.text, accept=verdict.accept,
                                      score=verdict.score, method=verdict.method))
            if not walk.decide(t_prev, d, verdict):
                break
            pipe.advance(i)
            if walk.stopped or not state.drafting:
                break
            i += 1
    finally:
        pipe.cancel()
    if pipe.draft_error is not None:
        state.draft_failed(pipe.draft_error)
    return judged, pipe, verify_s
