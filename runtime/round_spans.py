"""A round's requests on the answer's timeline (results.TraceSpan), as each kind of round ran them; the trace
page (eval/trace.py) draws them."""

from __future__ import annotations

import time

from lookahead_reasoning.programs.step_types import StepOutput
from lookahead_reasoning.runtime.acceptance import AcceptanceWalk
from lookahead_reasoning.runtime.answer_state import AnswerState
from lookahead_reasoning.runtime.results import TraceSpan
from lookahead_reasoning.runtime.streamed_fork import StreamedFork
from lookahead_reasoning.runtime.tree import DraftTree


def batched_spans(state: AnswerState, tree: DraftTree, started: float, draft_s: float, t1: float, t2: float,
                   verify_s: float, outputs: list[StepOutput], pairs: int) -> list[TraceSpan]:
    """A batched round on the timeline: its draft, its fork as one request, its judge call."""
    spans = []
    if tree.nodes:
        spans.append(state.span("draft", f"d1..d{tree.depth}" if tree.depth > 1 else "d1", t1 - draft_s, t1,
                                sum(n.step.completion_tokens for n in tree.nodes)))
    label = "t1" if len(outputs) == 1 else f"t1..t{len(outputs)} (one batch)"
    spans.append(state.span("target", label, t1, t2, sum(o.completion_tokens for o in outputs), "judged"))
    if pairs:
        spans.append(state.verify_span(t2, t2 + verify_s, pairs))
    return spans


def streamed_spans(state: AnswerState, tree: DraftTree, fork: StreamedFork, draft_started: float,
                   draft_s: float) -> list[TraceSpan]:
    """A streamed round on the timeline: its draft, each target branch with its fate, each judge call."""
    spans = [state.span("draft", "d1" if len(tree.nodes) == 1 else f"d1..d{len(tree.nodes)}", draft_started,
                        draft_started + draft_s, sum(n.step.completion_tokens for n in tree.nodes))] if tree.nodes else []
    for node, branch in fork.branches.items():
        spans.append(state.span("target", f"t{node + 1}", branch.started, branch.ended or fork.decided,
                                branch.tokens, branch.fate))
    spans += [state.verify_span(start, end, pairs) for start, end, pairs in fork.judge_calls]
    return spans


def pipeline_spans(state: AnswerState, pipe, walk: AcceptanceWalk) -> list[TraceSpan]:
    """A pipelined round on the timeline: each drafted step, each target branch, each judge call."""
    spans = [state.span("draft", f"d{i}", start, end, tokens)
             for i, (start, end, tokens) in enumerate(pipe.draft_spans, start=1)]
    kept_target = walk.outputs[-1] if walk.kept and walk.kept[-1].source == "target" else None
    for i, branch in sorted(pipe.branches.items()):
        fate = branch.fate
        if fate == "running":
            done = pipe.targets.get(i)
            fate = "kept" if done is not None and done.done() and not done.exception() and \
                done.result() is kept_target else ("judged" if branch.ended is not None else "unused")
        spans.append(state.span("target", f"t{i}", branch.started, branch.ended or time.perf_counter(),
                                branch.tokens, fate))
    spans += [state.verify_span(start, end, pairs) for start, end, pairs in pipe.judge_calls]
    return spans
