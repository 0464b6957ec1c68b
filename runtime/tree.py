"""Draft trees and their verification, shared by the sync and async engines.

A draft of width W and depth γ is a tree: W candidate steps after the prefix, W after
each complete candidate, and so on to depth γ (W = 1 is a chain). Verification:

- the target writes one step after every distinct prefix that needs one (the root and
  every complete node that has children; with `bonus`, complete leaves too), all in one
  fork, so each distinct prefix is prefilled once;
- the verifier judges every node against the target's step after the node's parent;
- the walk starts at the root and moves to the first child (in order) that the
  acceptance rule (acceptance.py) accepts; it stops where no child is;
- kept: the steps on the walked path, then the target's step after the path's end
  (always where a rejection stopped the walk; at a leaf only with `bonus`), up to
  the token cap.
"""

from __future__ import annotations

from dataclasses import dataclass

from lookahead_reasoning.programs.step_types import StepOutput
from lookahead_reasoning.runtime.acceptance import AcceptanceWalk, accepts
from lookahead_reasoning.verifiers.base import Verdict

ROOT = -1


@dataclass(frozen=True)
class Node:
    step: StepOutput
    parent: int  # index of the parent node, ROOT for the first level
    path: str  # text of the steps from the root to this node, inclusive
    depth: int  # 1 for the first level


@dataclass
class DraftTree:
    nodes: list[Node]
    width: int = 1  # candidates drafted per position

    @property
    def depth(self) -> int:
        """Levels drafted (0 for an empty tree)."""
        return max((n.depth for n in self.nodes), default=0)

    def children(self, parent: int) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.parent == parent]

    def optimistic_path(self) -> list[int]:
        """First child at every level: the path the walk takes if everything is accepted."""
        path, cur = [], ROOT
        while kids := self.children(cur):
            cur = kids[0]
            path.append(cur)
        return path

    def text_of(self, path: list[int]) -> str:
        return self.nodes[path[-1]].path if path else ""

    @classmethod
    def chain(cls, steps: list[StepOutput]) -> DraftTree:
        nodes, text = [], ""
        for i, step in enumerate(steps):
            text += step.text
            nodes.append(Node(step, i - 1 if i else ROOT, text, i + 1))
        return cls(nodes)


def draft_tree(models, prefix: str, depth: int, width: int, cap: int, max_nodes: int = 32) -> DraftTree:
    """Draft a chain (width 1, one program of γ sequential steps) or a tree level by level.

    A full tree has W + W² + … + W^γ nodes, each a draft request, a judge pair and
    (unless a leaf) a target branch. At most `max_nodes` are drafted: when a level
    would exceed the budget, only its first frontier nodes are expanded.
    """
    if width == 1:
        return DraftTree.chain(models.draft(prefix, depth, cap))
    nodes: list[Node] = []
    frontier = [(ROOT, "")]
    for level in range(1, depth + 1):
        frontier = frontier[: max(0, max_nodes - len(nodes)) // width]
        if not frontier:
            break
        candidates = models.sample([prefix + text for _, text in frontier], width, cap)
        next_frontier = []
        for (parent, text), steps in zip(frontier, candidates):
            seen: set[str] = set()
            for step in sorted(steps, key=lambda s: s.text):  # the order of samples is not reproducible
                if step.text in seen:
                    continue
                seen.add(step.text)
                nodes.append(Node(step, parent, text + step.text, level))
                if step.complete:
                    next_frontier.append((len(nodes) - 1, text + step.text))
        frontier = next_frontier
    return DraftTree(nodes, width)


def target_branches(tree: DraftTree, bonus: bool) -> list[int]:
    """Nodes after which the target writes a step (ROOT first)."""
    parents = {n.parent for n in tree.nodes}
    return [ROOT] + [
        i for i, n in enumerate(tree.nodes) if n.step.complete and (i in parents or bonus)
    ]


def walk_tree(
    tree: DraftTree, verdicts: list[Verdict], target_after: dict[int, StepOutput], walk: AcceptanceWalk
) -> int:
    """Feed the tree to `walk` from the root: at each node, the first child (in order) that the acceptance
    rule accepts; a rejection when no child is accepted, the target's step after the end when it has none.
    Returns how many accepted positions, from the root, were first children: the path the async engine
    drafts the next window from (`DraftTree.optimistic_path`) was walked that far.

    It goes on past the token cap, so that every position the verifier decided is counted.
    """
    cur, first_children, optimistic = ROOT, 0, True
    while not walk.ended:
        expected = target_after.get(cur)
        if expected is None:  # a leaf the target did not extend (without `bonus`)
            walk.close(None)
            break
        children = tree.children(cur)
        nxt = next((i for i in children if accepts(verdicts[i], tree.nodes[i].step, expected)), None)
        if nxt is not None:
            walk.accept(tree.nodes[nxt].step, verdicts[nxt].score)  # ends the walk if it did not end on the delimiter
            optimistic = optimistic and nxt == children[0]
            first_children += optimistic
            cur = nxt
        elif children:
            walk.reject(expected)
        else:
            walk.close(expected)
    return first_children
