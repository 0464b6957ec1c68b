"""The numbers a step states, and a gate that rejects a draft step stating a number nobody wrote before.

A wrong number is the error embeddings and small judges miss most ("48/2 = 24" against
"48*2 = 96"), and it is cheap to see in text. The gate's rule: a draft step is rejected when it
states a number (by value, ignoring sign; a fraction is its value) that appears neither in the
target's step nor in the context (where a fraction also states its parts). Numbers the draft
leaves out are never a reason to reject: a step that restates less ("9 eggs remain" for
"16 - 3 - 4 = 9") passes, and so does one that cites the problem's numbers the target did not
repeat. Pairs that pass go to the wrapped verifier.
"""

from __future__ import annotations

import math
import re
from typing import Sequence

from lookahead_reasoning.verifiers.base import Verdict, Verifier, ask_for_the_rest

GATE_METHOD = "numbers"  # the Verdict.method of a pair the gate rejected

# A number: 1,000 / 3.5 / .5 / 1/4 (a fraction written without spaces counts as its value).
_NUMBER = re.compile(r"(?<![\w.])-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:/\d+(?:\.\d+)?)?(?![\w/])")
_UNIT_POWER = re.compile(r"(?<=[A-Za-z)])\^\{?\d+\}?|[²³]")  # m^2, c^2: a unit or a symbol, not a value


def numbers_in(text: str) -> list[float]:
    """The values a step states, in order: 1,000 = 1000, 18.0 = 18, 1/4 = 0.25; powers of letters are skipped."""
    values = []
    for raw in _NUMBER.findall(_UNIT_POWER.sub(" ", text)):
        numerator, _, denominator = raw.replace(",", "").partition("/")
        try:
            value = float(numerator) / float(denominator) if denominator else float(numerator)
        except (ValueError, ZeroDivisionError):
            continue
        values.append(value)
    return values


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def same_result(step_a: str, step_b: str) -> bool:
    """Both steps end on the same number (their result), or neither states a number."""
    a, b = numbers_in(step_a), numbers_in(step_b)
    if not a or not b:
        return not a and not b
    return _same(a[-1], b[-1])


def new_numbers(target_step: str, draft_step: str, context: str = "") -> list[float]:
    """The draft's numbers that neither the target's step nor the context states (by value, ignoring sign)."""
    return _unknown(numbers_in(draft_step), stated(target_step) + stated(context))


def stated(text: str) -> list[float]:
    """The numbers a text makes known: its values, and the parts of its fractions too (48/2 states 48 and 2)."""
    return numbers_in(text) + numbers_in(text.replace("/", " / "))


def _unknown(values: list[float], known: list[float]) -> list[float]:
    magnitudes = [abs(k) for k in known]
    return [v for v in values if not any(_same(abs(v), k) for k in magnitudes)]


class NumbersGate:
    """Rejects a pair whose draft step brings a new number (see the module's rule) before `inner` is asked."""

    def __init__(self, inner: Verifier):
        self.inner = inner
        self.name = f"{inner.name}+{GATE_METHOD}"

    def verify(self, context: str, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        in_context = stated(context)  # read once per call: the context is long, the steps short
        verdicts: list[Verdict | None] = [
            Verdict(False, None, GATE_METHOD) if _unknown(new_numbers(t, d), in_context) else None
            for t, d in pairs
        ]
        return ask_for_the_rest(self.inner, context, pairs, verdicts)
