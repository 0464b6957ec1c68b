"""A gate that rejects a draft step whose mathematics disagrees with the target's step.

Both steps are read into what they state (formulas.py): equations, maps and standalone expressions, in
LaTeX or plain text, each part evaluated (expressions.py). The gate rejects a pair when
- the draft gives a quantity the target's step also gives (the same left-hand side: `d`, `P(x)`, `3s`,
  `\\text{Perimeter}`, the left of a map `(x, y) \\to ...`) a value none of the target's values for it
  equals, where both give it values of the same kind (constants, or expressions in the same letters); or
- the draft's result (the last part of its last chain, else its last standalone expression) is of the
  kind of the target's result, differs from it, and equals no value the target's step states (a draft
  that stops at one of the target's intermediate values, or restates one of its numbers, is left to the
  inner verifier).
Steps that state nothing comparable, and formulas it cannot read, go to the inner verifier, which also
decides every pair the gate does not reject: the gate only ever turns an acceptance into a rejection.
"""

from __future__ import annotations

from typing import Sequence

from lookahead_reasoning.verifiers.base import Verdict, Verifier, ask_for_the_rest
from lookahead_reasoning.verifiers.formulas import Stated, imaginary_unit, read_step
from lookahead_reasoning.verifiers.latex import latex_parser

MATH_METHOD = "math"  # the Verdict.method of a pair the gate rejected


def disagreement(target_step: str, draft_step: str, context: str = "") -> str | None:
    """Why the draft's mathematics disagrees with the target's step, or None where it does not (or where
    nothing comparable is stated). `i` is the imaginary unit where the text speaks of complex numbers."""
    return _disagreement(target_step, draft_step, imaginary_unit(context))


def _disagreement(target_step: str, draft_step: str, context_complex: bool) -> str | None:
    imaginary_i = context_complex or imaginary_unit(target_step) or imaginary_unit(draft_step)
    return _compare(read_step(target_step, imaginary_i), read_step(draft_step, imaginary_i))


def _compare(target: Stated, draft: Stated) -> str | None:
    for key, given in draft.quantities.items():
        known = target.quantities.get(key, ())
        for value in given:
            peers = [v for v in known if v.comparable(value)]
            if peers and not any(v.equals(value) for v in peers):
                return f"the draft gives {_describe(key)} another value"
    result, expected = draft.result, target.result
    if result is None or expected is None or not expected.comparable(result) or expected.equals(result):
        return None
    if any(value.equals(result) for value in target.values):
        return None
    return "the draft's result differs from the target's"


def _describe(key: tuple) -> str:
    kind, what = key[0], key[1]
    name = f"'{key[2]}'" if what == "text" else "the quantity in " + ", ".join(key[2])
    return f"the image of {name}" if kind == "map" else name


class MathGate:
    """Rejects a pair whose draft step's mathematics disagrees with the target's (see the module's rules)
    before `inner` is asked; `inner` decides the rest."""

    def __init__(self, inner: Verifier):
        self.inner = inner
        self.name = f"{inner.name}+{MATH_METHOD}"
        latex_parser()

    def verify(self, context: str, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        context_complex = imaginary_unit(context)  # read once per call: the context is long, the steps short
        verdicts: list[Verdict | None] = [
            Verdict(False, None, MATH_METHOD) if _disagrees(t, d, context_complex) else None for t, d in pairs
        ]
        return ask_for_the_rest(self.inner, context, pairs, verdicts)


def _disagrees(target_step: str, draft_step: str, context_complex: bool) -> bool:
    try:
        return _disagreement(target_step, draft_step, context_complex) is not None
    except Exception:  # noqa: BLE001  a step the gate cannot read is the inner verifier's to decide
        return False
