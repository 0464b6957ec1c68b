"""The target's recent step lengths, and the expected longest of n: a fork ends with its longest branch, so even
free branches cost more than a step where steps vary in length.
"""

from __future__ import annotations

from collections import deque

from lookahead_reasoning.runtime.adaptive.tuning import STEP_LENGTH_MEMORY



def expected_longest(lengths: list[float], n: int) -> float:
    """E[max of n draws with replacement from `lengths`]: Σ x₍ᵢ₎ ((i/N)ⁿ − ((i−1)/N)ⁿ) over the sorted lengths."""
    if not lengths:
        raise ValueError("no lengths")
    ordered, size = sorted(lengths), len(lengths)  # Timsort: linear where they come sorted
    return sum(x * ((i / size) ** n - ((i - 1) / size) ** n) for i, x in enumerate(ordered, start=1))


class StepLengths:
    """The lengths (tokens) of the target's recent steps; not thread-safe (the cost model holds its lock).
    The planner asks for the longest of n for every γ it weighs, so the sorted lengths are kept until a step
    is added."""

    def __init__(self, keep: int = STEP_LENGTH_MEMORY):
        self._recent: deque[int] = deque(maxlen=keep)
        self._sorted: list[int] | None = None
        self.seen = 0  # lengths added in all

    def add(self, tokens: int) -> None:
        if tokens > 0:
            self._recent.append(tokens)
            self._sorted = None
            self.seen += 1

    def state(self) -> list[int]:
        return list(self._recent)

    def restore(self, lengths: list[int]) -> None:
        self._recent.clear()
        self._recent.extend(int(n) for n in lengths if int(n) > 0)
        self._sorted = None
        self.seen = len(self._recent)

    def mean(self) -> float | None:
        return sum(self._recent) / len(self._recent) if self._recent else None

    def longest(self, n: int) -> float | None:
        """E[the longest of n steps], tokens; None before any step."""
        if not self._recent:
            return None
        if self._sorted is None:
            self._sorted = sorted(self._recent)
        return expected_longest(self._sorted, n)
