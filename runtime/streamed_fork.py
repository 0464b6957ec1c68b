"""A sync chain round's target fork as streamed branches, decided as they arrive.

The fork's branches t_0..t_m (t_k: the target's step after d_1..d_k) are streamed requests
(branches.py). t_0, the target's step after the round's prefix, is already running when the
draft writes its window: it was started at the round's start, or handed on by the round
before. The round judges d_k against t_{k-1} as soon as t_{k-1} has ended (every branch
that is in by then goes into the same judge call), in order, and ends at its decision:

- a rejection at position k: t_{k-1} is kept, and the branches after it can never be
  kept, so they are aborted on the server (`/abort_request`);
- an accepted step that ended on EOS or its cap ends the window the same way;
- the whole window accepted: the bonus branch t_m is the target's own step after the kept
  text, what the target alone would write next. The round does not wait for the whole of
  it: once it has written `handoff` tokens the round keeps those (target text: what AR
  writes; the whole step where it is no longer) and hands the branch on, still running, as
  the next round's t_0. The next round drafts from the end of that piece, so its first
  draft step completes the step t_0 is writing, and the two are judged as whole steps: the
  kept piece, then each's rest. The cut is at a token count, not at a moment, so the
  answer does not depend on how fast the servers ran.

So no round waits for a branch it will not keep, and no branch after the kept text is
sent twice. With a verifier that accepts only equal steps the answer is the target's own,
token for token, whatever the branches' lengths and the order in which they end.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from lookahead_reasoning.programs.step_types import StepOutput
from lookahead_reasoning.runtime.acceptance import accepts
from lookahead_reasoning.runtime.branches import Branch, outcome, start_branch
from lookahead_reasoning.runtime.tree import ROOT, DraftTree
from lookahead_reasoning.verifiers.base import Verdict


@dataclass
class StreamedFork:
    """What a streamed fork gathered: the branches that came back, the verdicts, the judge's calls."""

    branches: dict[int, Branch] = field(default_factory=dict)  # branch node (ROOT: the prefix) -> branch
    target_after: dict[int, StepOutput] = field(default_factory=dict)  # branch node -> its step, where waited for
    verdicts: dict[int, Verdict] = field(default_factory=dict)  # judged node -> verdict
    pairs: dict[int, tuple[str, str]] = field(default_factory=dict)  # judged node -> (target step, draft step)
    judge_calls: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, pairs), perf_counter
    handed_on: Branch | None = None  # the bonus branch after a wholly accepted window, still running
    piece: StepOutput | None = None  # what the handed-on branch had written at the decision: kept now
    decided: float = 0.0  # time.perf_counter() at the decision

    @property
    def verify_s(self) -> float:
        """The judge's calls, summed (they overlap branches still running)."""
        return sum(end - start for start, end, _ in self.judge_calls)


def stream_fork(
    models, pool: ThreadPoolExecutor, prefix: str, tree: DraftTree, root: Branch, cap: int, judge, delimiter: str,
    handoff: int,
) -> StreamedFork:
    """Send a branch after every complete node of a chain `tree` (t_0, `root`, already runs) and judge its nodes in
    order as their parents' branches end. `judge(pairs)` returns one verdict per (target step, draft step)
    pair; a target failure propagates from its branch. Branches not needed at the decision are aborted; the
    bonus branch of a wholly accepted window is cut at `handoff` tokens and handed on, or kept whole."""
    out = StreamedFork(branches={ROOT: root})
    for i, node in enumerate(tree.nodes):
        if node.step.complete:
            out.branches[i] = start_branch(models, pool, prefix, node.path, cap, handoff)
    try:
        last = _judge_in_order(tree, out, judge)
        out.decided = time.perf_counter()
        if last is not None and last in out.branches:
            bonus = out.branches[last]
            bonus.reached.wait()
            out.piece = bonus.cut(delimiter)
            if out.piece is None:  # a short step: kept whole
                _arrived(out, last)
                bonus.fate = "kept"
            else:
                out.handed_on = bonus
                bonus.fate = "handed on"
    finally:
        for branch in out.branches.values():
            if branch.fate == "running":
                if branch.done():
                    branch.fate = "unused"
                else:
                    branch.abort()
    return out


def _arrived(out: StreamedFork, node: int) -> StepOutput:
    """The branch's step, less the piece of it a round before already kept."""
    branch = out.branches[node]
    step = outcome(branch)
    if step is None:
        raise RuntimeError(f"target branch {branch.rid} was aborted while the round needed it")
    branch.fate = "judged"
    out.target_after[node] = branch.rest(step)
    return out.target_after[node]


def _pair(tree: DraftTree, out: StreamedFork, i: int) -> tuple[str, str]:
    """The (target step, draft step) pair the verifier judges for node i: whole steps, so the first node after a
    kept piece of t_0 is judged with that piece in front of both."""
    parent = tree.nodes[i].parent
    piece = out.branches[ROOT].consumed.text if parent == ROOT and out.branches[ROOT].consumed else ""
    return piece + out.target_after[parent].text, piece + tree.nodes[i].step.text


def _judge_in_order(tree: DraftTree, out: StreamedFork, judge) -> int | None:
    """Judge nodes 0, 1, … (a chain: node k's parent is k−1) until one decides the walk; the last node when
    the whole window was accepted and ended on the delimiter (its branch is the bonus), else None."""
    k, n = 0, len(tree.nodes)
    if n == 0:  # nothing drafted: the round keeps t_0
        _arrived(out, ROOT)
        out.branches[ROOT].fate = "kept"
        return None
    while k < n:
        parent = tree.nodes[k].parent
        _arrived(out, parent)
        ready = [k]  # with every following node whose parent's branch has already ended
        while ready[-1] + 1 < n:
            after = out.branches.get(tree.nodes[ready[-1] + 1].parent)
            if after is None or not after.done():
                break
            _arrived(out, tree.nodes[ready[-1] + 1].parent)
            ready.append(ready[-1] + 1)
        started = time.perf_counter()
        pairs = [_pair(tree, out, i) for i in ready]
        out.pairs.update(zip(ready, pairs))
        verdicts = judge(pairs)
        out.judge_calls.append((started, time.perf_counter(), len(ready)))
        for i, verdict in zip(ready, verdicts):
            out.verdicts[i] = verdict
            step = tree.nodes[i].step
            if not accepts(verdict, step, out.target_after[tree.nodes[i].parent]):
                out.branches[tree.nodes[i].parent].fate = "kept"
                return None
            if not step.complete:
                return None
        k = ready[-1] + 1
    return n - 1
