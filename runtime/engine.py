"""The lookahead engines: sync (the reference) and async (drafting overlaps verification).

Sync round from prefix P:
  1. the draft writes a window: d_1..d_m one after another (m ≤ γ; it stops early at
     EOS or the length cap, since nothing can follow such a step), or a tree of W
     candidates per position (see tree.py);
  2. the target writes t_k after P + d_1..d_k for every k whose prefix is made of
     complete steps, all in one fork;
  3. the verifier judges the pairs (t_{k-1}, d_k);
  4. the accepted prefix d_1..d_j is kept, then t_j, the target's own step after it
     (when that branch exists). Every round keeps at least one step of target quality.

Async: while the target and judge verify window r, the draft already drafts window
r+1 from the end of window r, assuming it will be fully accepted. If it is, window
r+1 is ready (or nearly) when verification ends; on a rejection it is discarded and
drafting restarts from the new prefix. On full acceptance the target's bonus step
after the window is not kept (window r+1 was drafted without it), so the target
writes only the branches a rejection could need.

A draft step is accepted only if the verifier says so *and* it ended the same way as
the target's step (both on the delimiter, both on EOS, or both on the cap): a draft
that stops the reasoning where the target goes on is not equivalent. The rule, the
token cap included, lives in acceptance.py; both engines feed it position by position.
Statistics are gathered by a RunMetrics (stats.py) that observes requests and rounds.

Faults degrade toward the target: a failing draft server or verifier turns drafting
off for the rest of the answer, and it goes on with target steps only (the answer
stays correct, only slower). A failing target server ends the answer with ServerFailure.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable, Protocol

from lookahead_reasoning.errors import Cancelled, LookaheadError, ServerFailure, TimeLimitExceeded, target_failed
from lookahead_reasoning.programs.step_types import StepOutput, split_steps
from lookahead_reasoning.runtime.acceptance import AcceptanceWalk, step_tokens
from lookahead_reasoning.runtime.answer_state import AnswerState, server_s
from lookahead_reasoning.runtime.branches import start_branch, supports_streaming
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.adaptive.depth import DepthPolicy, RoundPlan, make_depth_policy
from lookahead_reasoning.runtime.adaptive.tuning import STREAMED_MAX_ANSWERS
from lookahead_reasoning.runtime.pipeline import run_chain_round
from lookahead_reasoning.runtime.results import JudgedDraft, LookaheadResult, RoundRecord, StepRecord
from lookahead_reasoning.runtime.round_spans import batched_spans, pipeline_spans, streamed_spans
from lookahead_reasoning.runtime.streamed_fork import stream_fork
from lookahead_reasoning.runtime.tree import ROOT, DraftTree, draft_tree, target_branches, walk_tree
from lookahead_reasoning.verifiers.base import Verdict, Verifier


class StepModels(Protocol):
    """What the engines need from the models (SGLangStepModels, or a scripted stand-in)."""

    def prompt(self, question: str) -> str: ...

    def draft(self, prefix: str, gamma: int, max_step_tokens: int | None = None) -> list[StepOutput]: ...

    def sample(self, prefixes: list[str], width: int, max_step_tokens: int | None = None) -> list[list[StepOutput]]: ...

    def target(
        self, prefix: str, continuations: list[str], max_step_tokens: int | list[int] | None = None,
        commit_prefix: bool = True,
    ) -> list[StepOutput]: ...

    def generate(self, prefix: str, max_tokens: int) -> StepOutput: ...


def render_prompt(models: StepModels, question: str) -> str:
    if not question or not question.strip():
        raise LookaheadError("the question is empty")
    try:
        return models.prompt(question)
    except Exception as error:
        raise target_failed(error) from None


@dataclass
class BatchedFork:
    """A batched fork: the branches it wrote (tree nodes, ROOT for the prefix) and one step per request."""

    branches: list[int]
    outputs: list[StepOutput]  # the branches' steps, then a fork probe's short step
    others: float | None  # other answers' target requests in flight, on average
    started: float
    ended: float

    @property
    def returned(self) -> list[StepOutput]:
        """The branches' steps (a fork probe's left out)."""
        return self.outputs[: len(self.branches)]

    @property
    def target_after(self) -> dict[int, StepOutput]:
        return dict(zip(self.branches, self.outputs))


class Engine:
    """The round skeleton (`continue_from`) and its shared machinery; subclasses decide how a drafting round runs."""

    mode = "sync"

    def __init__(
        self,
        config: LookaheadConfig,
        models: StepModels,
        verifier: Verifier,
        on_round: Callable[[RoundRecord], None] | None = None,
        policy: DepthPolicy | None = None,
        on_step: Callable[[StepRecord], None] | None = None,
        deadline: float | None = None,
        is_cancelled: Callable[[], bool] | None = None,
    ):
        self.config = config
        self.models = models
        self.verifier = verifier
        self.on_round = on_round
        self.on_step = on_step  # called with every kept step as soon as it is kept (streaming)
        self.deadline = deadline  # time.monotonic() after which no new round starts
        self.is_cancelled = is_cancelled  # when it says so, no new round starts either
        # what the adaptive policy learns (α, c, j) carries over from answer to answer
        self.policy = policy or make_depth_policy(config, self.mode)

    def answer(self, question: str) -> LookaheadResult:
        """Answer `question` (rendered in the target's chat template) until EOS or the token cap."""
        return self.continue_from(render_prompt(self.models, question))

    def continue_from(self, prompt: str) -> LookaheadResult:
        """Reason on from `prompt` (already in the target's chat template) until EOS or the token cap: every
        engine's rounds, each planned, then an AR stretch or a drafting round."""
        state = AnswerState(prompt)
        self.policy.answer_started()
        try:
            while True:
                self._check_deadline()
                started = time.perf_counter()
                plan = self._plan(state, self.policy)
                streams = self._streams(plan)
                if streams or state.handed_on is not None:  # a running target step handed on is kept first
                    record = self._streamed_round(state, plan if streams else RoundPlan(0), started)
                elif plan.stretch_tokens:
                    record = self._ar_stretch(state, plan.stretch_tokens, started)
                else:
                    record = self._drafting_round(state, plan, started)
                if self._done(state, record):
                    break
        finally:
            if state.handed_on is not None:  # the answer ended (EOS, the token cap, an error) before its next round
                state.handed_on.abort()
            # requests of discarded speculation may still be in flight when the answer ends: don't wait for them
            state.pool.shutdown(wait=False, cancel_futures=True)
            self.policy.answer_finished()
        return state.result(self.policy.cost_estimate())

    def _drafting_round(self, state: AnswerState, plan: RoundPlan, started: float) -> RoundRecord:
        """One round of a batched fork (the async engine: its pipeline) that drafts `plan.depth` steps (none for an AR
        round of one step) and verifies them."""
        raise NotImplementedError

    def _streams(self, plan: RoundPlan) -> bool:
        """Whether the round of `plan` runs as streamed branches decided as they arrive (streamed_fork.py)."""
        return False

    def _streamed_round(self, state: AnswerState, plan: RoundPlan, started: float) -> RoundRecord:
        """A chain round of streamed branches that ends at its decision (streamed_fork.py). t_0, the target's step
        after the prefix, runs while the draft writes: it was handed on by the round before, or starts now."""
        cap = self._cap(state)
        root, state.handed_on = state.handed_on, None
        kept_piece = root.consumed.text if root is not None and root.consumed is not None else ""
        if root is not None and root.after + kept_piece != state.prefix:  # the walk was capped: never keep it
            root.abort()
            root = None
        fresh = root is None  # t_0 starts in this round
        try:
            if root is None:
                if not state.log and callable(getattr(self.models, "commit_target", None)):
                    self.models.commit_target(state.prefix)  # the prompt, prefilled once for every branch
                root = start_branch(self.models, state.pool, state.prefix, "", cap)
        except Exception as error:
            raise target_failed(error) from None
        tree, draft_s = DraftTree([]), 0.0
        drafting = time.perf_counter()  # the draft's time leaves out the round's planning (the policy's own)
        if plan.depth:
            try:
                tree = self._draft(state.prefix, plan, cap)
            except Exception as error:
                state.draft_failed(error)
            draft_s = time.perf_counter() - drafting
        state.metrics.count_tokens("draft", [node.step for node in tree.nodes])
        t1 = time.perf_counter()
        try:
            with self.policy.target_load.track(1 + sum(n.step.complete for n in tree.nodes)) as load:
                fork = stream_fork(self.models, state.pool, state.prefix, tree, root, cap,
                                   partial(self.verify, state), self.config.delimiter,
                                   self.config.handoff_tokens)
        except Exception as error:
            raise target_failed(error) from None
        state.handed_on = fork.handed_on
        returned = list(fork.target_after.values())  # the branches the round waited for
        state.metrics.count_tokens("target", returned)
        verdicts = [fork.verdicts.get(i, Verdict(False, None, "unjudged")) for i in range(len(tree.nodes))]
        walk = self._walk(state)
        walk_tree(tree, verdicts, fork.target_after, walk)
        if fork.piece is not None:
            walk.keep_piece(fork.piece)
        judged = [
            JudgedDraft(draft=fork.pairs[i][1], target=fork.pairs[i][0], accept=verdicts[i].accept,
                        score=verdicts[i].score, method=verdicts[i].method)
            for i in sorted(fork.verdicts)
        ]
        # whole steps (a handed-on t_0's piece kept a round before included): a sample of the target's step lengths
        waited = [fork.branches[node].tokens for node in fork.target_after]
        # The target's time per token is sampled only where a lone request's time is known: t_0 of a round that
        # drafted nothing and sent it itself. A drafting round's branches start at different moments (t_0 while
        # the draft writes, a handed-on one a round earlier), so its fork time is not the time of its tokens.
        lone = fork.branches[ROOT] if fresh and not tree.nodes and fork.branches[ROOT].ended else None
        return self._finish_round(
            state, walk,
            depth=plan.depth, kind="drafting" if plan.depth else "ar", started=started, judged=judged, draft_s=draft_s,
            target_s=lone.ended - lone.started if lone else max(0.0, fork.decided - t1 - fork.verify_s),
            target_server_s=fork.target_after[ROOT].server_s if lone else None,
            verify_s=fork.verify_s, judge_calls=len(fork.judge_calls), branches=len(fork.branches),
            target_tokens=lone.tokens if lone else 0, target_tokens_all=lone.tokens if lone else 0,
            target_others=load.others,
            draft_tokens=sum(n.step.completion_tokens for n in tree.nodes), draft_steps=len(tree.nodes),
            branch_tokens=waited, spans=streamed_spans(state, tree, fork, drafting, draft_s),
            decided_s=state.clock(fork.decided),
        )

    def _check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TimeLimitExceeded("the request exceeded its time limit")
        if self.is_cancelled is not None and self.is_cancelled():
            raise Cancelled("the answer was cancelled")

    def announce(self, step: StepRecord) -> None:
        if self.on_step is not None:
            self.on_step(step)

    def _cap(self, state: AnswerState) -> int:
        return max(1, min(self.config.max_step_tokens, self.config.max_tokens - state.metrics.output_tokens))

    def _walk(self, state: AnswerState) -> AcceptanceWalk:
        """The acceptance walk of the answer's next round; kept steps are announced as they are kept."""
        return AcceptanceWalk(len(state.log), self.config.max_tokens - state.metrics.output_tokens, self.announce)

    def _draft(self, prefix: str, plan: RoundPlan, cap: int) -> DraftTree:
        return draft_tree(self.models, prefix, plan.depth, plan.width, cap, self.config.max_tree_nodes)

    def _plan(self, state: AnswerState, policy: DepthPolicy) -> RoundPlan:
        """The next round's plan; once drafting was turned off, AR rounds of one step."""
        if not state.drafting:
            return RoundPlan(0)
        return policy.next_round(None if self.deadline is None else self.deadline - time.monotonic(), first=not state.log)

    def _ar_stretch(self, state: AnswerState, tokens: int, started: float) -> RoundRecord:
        """An AR round that writes several steps in one request, as the target alone would (adaptive/stretches.py)."""
        t1 = time.perf_counter()
        tokens = min(tokens, self.config.max_tokens - state.metrics.output_tokens)
        try:
            with self.policy.target_load.track(1) as load:
                output = self.models.generate(state.prefix, tokens)
        except Exception as error:
            raise target_failed(error) from None
        state.metrics.count_tokens("target", [output])
        steps = split_steps(output, self.config.delimiter)
        walk = self._walk(state)
        walk.keep_targets(steps)
        return self._finish_round(
            state, walk,
            depth=0, kind="stretch", started=started, judged=[], draft_s=0.0, verify_s=0.0, branches=1,
            target_s=time.perf_counter() - t1, target_tokens=output.completion_tokens,
            target_tokens_all=output.completion_tokens, target_others=load.others,
            target_server_s=output.server_s,
            spans=[state.span("target", f"{len(steps)} steps in one request", t1, time.perf_counter(),
                              output.completion_tokens, "kept")],
        )

    def _verify_round(
        self, state: AnswerState, tree: DraftTree, plan: RoundPlan, cap: int, draft_s: float, started: float, bonus: bool,
    ) -> RoundRecord:
        """A batched round after its draft: the target's fork, the judge, the acceptance walk; the round's record.

        With an empty tree, `plan.probe_tokens` caps a fork probe's short second branch (probes.py);
        `plan.measuring`: the round prices the draft and the verifier (planner.py), with `bonus` False."""
        state.metrics.count_tokens("draft", [node.step for node in tree.nodes])
        probe_tokens = 0 if tree.nodes else plan.probe_tokens
        fork = self._batched_fork(state, tree, cap, bonus, probe_tokens)
        verdicts, verify_s = self._judge_tree(state, tree, fork.target_after)
        state.metrics.count_tokens("target", fork.returned)  # the first round's root branch gives the prompt tokens
        walk = self._walk(state)
        first_children = walk_tree(tree, [verdicts.get(i, Verdict(False, None, "unjudged"))
                                          for i in range(len(tree.nodes))], fork.target_after, walk)
        judged = [
            JudgedDraft(draft=tree.nodes[i].step.text, target=fork.target_after[tree.nodes[i].parent].text,
                        accept=v.accept, score=v.score, method=v.method)
            for i, v in sorted(verdicts.items())
        ]
        returned, outputs = fork.returned, fork.outputs
        kind = ("probe" if probe_tokens else "measuring" if plan.measuring and tree.nodes
                else "drafting" if plan.depth else "ar")
        return self._finish_round(
            state, walk,
            depth=plan.depth, kind=kind, started=started, judged=judged, draft_s=draft_s,
            target_s=fork.ended - fork.started,
            target_server_s=server_s([t.server_s for t in outputs], max), verify_s=verify_s,
            branches=len(fork.branches), target_tokens=max(t.completion_tokens for t in returned),
            target_tokens_all=sum(t.completion_tokens for t in outputs), target_others=fork.others,
            draft_tokens=sum(n.step.completion_tokens for n in tree.nodes) // tree.width, draft_steps=tree.depth,
            branch_tokens=[t.completion_tokens for t in returned], width=tree.width,
            first_candidates=first_children,
            spans=batched_spans(state, tree, started, draft_s, fork.started, fork.ended, verify_s, outputs,
                                len(judged)),
            decided_s=state.clock(fork.ended + verify_s),
        )

    def _batched_fork(self, state: AnswerState, tree: DraftTree, cap: int, bonus: bool,
                      probe_tokens: int) -> BatchedFork:
        """The round's target branches in one request; `probe_tokens`: a fork probe's short second branch."""
        branches = target_branches(tree, bonus)
        continuations = ["" if b == ROOT else tree.nodes[b].path for b in branches]
        caps: int | list[int] = cap
        if probe_tokens:  # the start of the same step once more in the fork: what a second branch costs, B(2)
            continuations.append("")
            caps = [cap, min(cap, probe_tokens)]
        started = time.perf_counter()
        try:
            with self.policy.target_load.track(len(continuations)) as load:
                # after the first round the prefix was written by a target branch: already in the cache
                outputs = self.models.target(state.prefix, continuations, caps, commit_prefix=not state.log)
        except Exception as error:
            raise target_failed(error) from None
        if len(outputs) != len(continuations):
            raise ServerFailure(f"the target returned {len(outputs)} steps for {len(continuations)} branches")
        return BatchedFork(branches, outputs, load.others, started, time.perf_counter())

    def _judge_tree(self, state: AnswerState, tree: DraftTree,
                    target_after: dict[int, StepOutput]) -> tuple[dict[int, Verdict], float]:
        """Every node whose parent's branch came back, judged in one call: (verdicts by node, seconds)."""
        started = time.perf_counter()
        judgeable = [i for i, n in enumerate(tree.nodes) if n.parent in target_after]
        pairs = [(target_after[tree.nodes[i].parent].text, tree.nodes[i].step.text) for i in judgeable]
        return dict(zip(judgeable, self.verify(state, pairs))), time.perf_counter() - started

    def _finish_round(self, state: AnswerState, walk: AcceptanceWalk, **measured) -> RoundRecord:
        """Record the round's walk, count it, append its kept steps to the run, log it and report it.

        `measured`: what the round's requests did (RoundRecord's fields up to the walk's outcome)."""
        measured.setdefault("first_candidates", walk.accepted)  # a chain: every accepted position was a first candidate
        record = RoundRecord(
            **measured, index=len(state.log), accepted=walk.accepted, positions=walk.positions, kept=walk.kept,
            finished=bool(walk.outputs) and walk.outputs[-1].ending == "eos",
            wall_s=time.perf_counter() - measured["started"],
            output_tokens=sum(step_tokens(o) for o in walk.outputs), faults=state.faults,
        )
        state.faults = []
        state.metrics.observe_round(record, walk.outputs)
        self.policy.observe(record)  # before on_round, so a live view shows what this round taught the policy
        state.log.append(record)
        state.steps.extend(record.kept)
        state.text += "".join(s.text for s in record.kept)
        if self.on_round is not None:
            self.on_round(record)
        return record

    def verify(self, state: AnswerState, pairs: list[tuple[str, str]]) -> list[Verdict]:
        if not pairs:
            return []
        try:
            verdicts = self.verifier.verify(state.prefix, pairs)
            if len(verdicts) != len(pairs):
                raise ValueError(f"{len(verdicts)} verdicts for {len(pairs)} pairs")
        except Exception as error:
            state.degrade("verifier", "verifier failed, rejecting drafts from now on", error)
            return [Verdict(False, None, "unusable")] * len(pairs)
        state.metrics.count_tokens("judge", [v for v in verdicts if v.prompt_tokens])  # those a model was asked for
        return verdicts

    def _done(self, state: AnswerState, record: RoundRecord) -> bool:
        if record.finished:
            state.finish = "eos"
            return True
        if state.metrics.output_tokens >= self.config.max_tokens:
            state.finish = "max_tokens"
            return True
        return False


class SyncEngine(Engine):
    mode = "sync"

    def _streams(self, plan: RoundPlan) -> bool:
        """Chain rounds stream (fork="streamed") where the models can send a branch alone, while at most
        STREAMED_MAX_ANSWERS answers share the policy: a streamed round sends each branch, abort and judged pair on
        its own, about three times a batched round's client CPU, and with many answers the client's CPU is what
        runs out. Fork probes and measuring rounds time one batched fork."""
        return (self.config.fork == "streamed" and plan.width == 1 and not plan.probe_tokens and not plan.measuring
                and not plan.stretch_tokens and self.policy.answers <= STREAMED_MAX_ANSWERS
                and supports_streaming(self.models))

    def _drafting_round(self, state: AnswerState, plan: RoundPlan, started: float) -> RoundRecord:
        cap = self._cap(state)
        tree = DraftTree([])
        drafting = time.perf_counter()  # the draft's time leaves out the round's planning (the policy's own)
        if plan.depth:
            try:
                tree = self._draft(state.prefix, plan, cap)
            except Exception as error:
                state.draft_failed(error)
        # a measuring round's target writes only its own step: no branch after the draft
        return self._verify_round(state, tree, plan, cap, time.perf_counter() - drafting, started,
                                  bonus=not plan.measuring)


class AsyncEngine(Engine):
    """W = 1: step-level pipelining (pipeline.py). W > 1: window pipelining: while a
    window of candidates is verified, the next window is drafted from the end of its
    first-candidate path, and kept if that whole path is accepted."""

    mode = "async"

    def _drafting_round(self, state: AnswerState, plan: RoundPlan, started: float) -> RoundRecord:
        if self.config.width == 1:
            return self._chain_round(state, plan, started)
        return self._window_round(state, plan, started)

    def _chain_round(self, state: AnswerState, plan: RoundPlan, started: float) -> RoundRecord:
        walk = self._walk(state)
        judged, pipe, verify_s = run_chain_round(self, state, walk, plan.depth, self._cap(state), state.pool)
        return self._finish_round(
            state, walk,
            depth=plan.depth, kind="drafting" if plan.depth else "ar", started=started, judged=judged,
            draft_s=sum(pipe.draft_times),
            target_s=statistics.mean(pipe.target_times) if pipe.target_times else 0.0,
            target_server_s=server_s(pipe.target_server_times, statistics.mean),
            verify_s=verify_s / max(1, len(judged)), branches=len(pipe.target_times),
            target_tokens=round(statistics.mean(pipe.target_tokens)) if pipe.target_tokens else 0,
            draft_tokens=sum(pipe.draft_tokens), draft_steps=len(pipe.draft_times),
            branch_tokens=list(pipe.target_tokens),
            target_others=statistics.mean(pipe.target_others) if pipe.target_others else None,
            spans=pipeline_spans(state, pipe, walk), decided_s=state.clock(time.perf_counter()),
        )

    def _timed_draft(self, prefix: str, plan: RoundPlan, cap: int) -> tuple[DraftTree, float]:
        t0 = time.perf_counter()
        tree = self._draft(prefix, plan, cap)
        return tree, time.perf_counter() - t0

    def _window_round(self, state: AnswerState, plan: RoundPlan, started: float) -> RoundRecord:
        cap = self._cap(state)
        tree, draft_s = DraftTree([]), 0.0
        if plan.depth:
            pending = state.next_window
            state.next_window = None
            if pending is None or pending[1] != state.prefix:  # none yet, or a rejection made it stale
                pending = (state.pool.submit(self._timed_draft, state.prefix, plan, cap), state.prefix)
            try:
                tree, draft_s = pending[0].result()
            except Exception as error:
                state.draft_failed(error)
            optimistic = tree.optimistic_path()
            ends = tree.nodes[optimistic[-1]].step if optimistic else None
            if state.drafting and ends is not None and ends.ending != "eos":
                base = state.prefix + tree.text_of(optimistic)
                state.next_window = (state.pool.submit(self._timed_draft, base, self.policy.peek_round(), cap), base)
        return self._verify_round(state, tree, plan, cap, draft_s, started, bonus=False)


def make_engine(config: LookaheadConfig, models: StepModels, verifier: Verifier, **options) -> Engine:
    """The engine `config.engine` names; options: on_round, on_step, policy, deadline, is_cancelled."""
    engine_class = AsyncEngine if config.engine == "async" else SyncEngine
    return engine_class(config, models, verifier, **options)
