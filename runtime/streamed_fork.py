"""A sync chain round's target fork, judged as its branches finish.

The fork's branches t_0..t_m (t_k: the target's step after d_1..d_k) run as concurrent
requests, so the server batches them as it would one batched request. Instead of
waiting for the longest, the round judges d_k against t_{k-1} as soon as t_{k-1} has
arrived (every branch that is in by then goes into the same judge call), in order:

- a rejection at position k decides the round: t_{k-1} is kept, and the branches after
  it can never be kept, so they are aborted on the server (`/abort_request`);
- an accepted step that ended on EOS or its cap ends the window the same way;
- after the whole window is accepted, the round waits for the bonus branch t_m.

A round thus ends with the branches it keeps or needs to judge, not with the longest
branch, and the judge's calls overlap the branches still running. What is kept is the
same as with one batched fork: the acceptance walk (tree.walk_tree) reads only the
branches and verdicts gathered here.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from lookahead_reasoning.programs.step_types import StepOutput
from lookahead_reasoning.runtime.acceptance import accepts
from lookahead_reasoning.runtime.tree import ROOT, DraftTree
from lookahead_reasoning.verifiers.base import Verdict


@dataclass
class StreamedFork:
    """What a streamed fork gathered: the branches that came back, the verdicts, the judge's time."""

    target_after: dict[int, StepOutput] = field(default_factory=dict)  # branch node (ROOT: the prefix) -> t
    verdicts: dict[int, Verdict] = field(default_factory=dict)  # judged node -> verdict
    verify_s: float = 0.0  # the judge's calls, summed (they overlap branches still running)


def supports_streaming(models) -> bool:
    """Whether the models can send one target branch with a request id, and abort it."""
    return callable(getattr(models, "target_branch", None)) and callable(getattr(models, "abort_target", None))


def stream_fork(
    models, pool: ThreadPoolExecutor, prefix: str, tree: DraftTree, branches: list[int], cap: int, judge,
) -> StreamedFork:
    """Run `branches` of a chain tree and judge its nodes in order as their parents' branches arrive.

    `judge(pairs)` returns one verdict per (target step, draft step) pair; target failures propagate
    from the branch's future. Branches not needed when the walk is decided are aborted."""
    rids = {b: f"lookahead-{uuid.uuid4().hex}" for b in branches}
    futures: dict[int, Future] = {}
    for b in branches:
        continuation = "" if b == ROOT else tree.nodes[b].path
        futures[b] = pool.submit(models.target_branch, prefix, continuation, cap, rids[b])
    out = StreamedFork()
    try:
        _judge_in_order(tree, futures, judge, out)
    finally:
        for b, future in futures.items():
            if not future.done() and not future.cancel():  # already sent: stop it on the server
                models.abort_target(rids[b])
    return out


def _judge_in_order(tree: DraftTree, futures: dict[int, Future], judge, out: StreamedFork) -> None:
    """Judge nodes 0, 1, … (a chain: node k's parent is k−1) until one decides the walk."""
    k, n = 0, len(tree.nodes)
    while k < n:
        parent = tree.nodes[k].parent
        if parent not in futures:  # no branch after the parent: nothing to judge against
            return
        out.target_after[parent] = futures[parent].result()
        ready = [k]  # with every following node whose parent's branch is already in
        while ready[-1] + 1 < n:
            after = futures.get(tree.nodes[ready[-1] + 1].parent)
            if after is None or not after.done():
                break
            out.target_after[tree.nodes[ready[-1] + 1].parent] = after.result()
            ready.append(ready[-1] + 1)
        started = time.perf_counter()
        verdicts = judge([(out.target_after[tree.nodes[i].parent].text, tree.nodes[i].step.text) for i in ready])
        out.verify_s += time.perf_counter() - started
        for i, verdict in zip(ready, verdicts):
            out.verdicts[i] = verdict
            step = tree.nodes[i].step
            if not accepts(verdict, step, out.target_after[tree.nodes[i].parent]) or not step.complete:
                return
        k = ready[-1] + 1
    last = n - 1
    if last in futures:  # the whole window was accepted: the target's step after it is kept
        out.target_after[last] = futures[last].result()
