"""A gate that rejects a draft step whose mathematics disagrees with the target's step.

Both steps are read into what they state (formulas.py): equations, maps and standalone expressions, in
LaTeX or plain text, each part evaluated (expressions.py). The gate rejects a pair when
- the draft gives a quantity the target's step also gives (the same left-hand side: `d`, `P(x)`, `3s`,
  `\\text{Perimeter}`, the left of a map `(x, y) \\to ...`) a value none of the target's values for it
  equals, where both give it values of the same kind (constants, or expressions in the same letters); or
- the draft's result (the last part of its last chain, else its last standalone expression) is of the
  kind of the target's result, differs from it, and equals no value the target's step states (a draft
  that stops at one of the target's intermediate values, or restates one of its numbers, is left to the
  inner verifier); or
- both steps' last equations give the same constant to expressions in letters that differ as functions (at
  the shared sample points): `5-a = 9` for `(5-a)^2 = 9`, `9(a-b) = 27` for `9(13-b) = 27`. It is left
  alone where the constants differ (`2x = 6` and `x = 3` state one equation), where the constant is 0, 1
  or -1 (`2x - 6 = 0` and `x - 3 = 0`, `x/y = 1` and `y/x = 1` state one equation too), where either step
  also states the other's equation (a system, in another order), and where one expression lacks a letter
  of the other that the context or a step gives a value (`a = 13`: a substitution); or
- one step states mathematics (an equation, a named quantity's value, or two numbers or more) and the
  other writes no formula and at most one number: the two have reached different points of the solution
  (one sets up `a + b = 13` where the other only announces its plan, one gives the remainder of 2004 by
  12 where the other only says it will work it out).
Steps that state nothing comparable, and formulas it cannot read, go to the inner verifier, which also
decides every pair the gate does not reject: the gate only ever turns an acceptance into a rejection.
"""

from __future__ import annotations

from typing import Sequence

from lookahead_reasoning.verifiers.base import Verdict, Verifier, ask_for_the_rest
from lookahead_reasoning.verifiers.expressions import Value
from lookahead_reasoning.verifiers.formulas import Stated, gives_a_value, imaginary_unit, read_step
from lookahead_reasoning.verifiers.latex import latex_parser

MATH_METHOD = "math"  # the Verdict.method of a pair the gate rejected


def disagreement(target_step: str, draft_step: str, context: str = "") -> str | None:
    """Why the draft's mathematics disagrees with the target's step, or None where it does not (or where
    nothing comparable is stated). `i` is the imaginary unit where the text speaks of complex numbers."""
    return _disagreement(target_step, draft_step, imaginary_unit(context), context)


def _disagreement(target_step: str, draft_step: str, context_complex: bool, context: str = "") -> str | None:
    imaginary_i = context_complex or imaginary_unit(target_step) or imaginary_unit(draft_step)
    target, draft = read_step(target_step, imaginary_i), read_step(draft_step, imaginary_i)
    return _compare(target, draft) or _same_value_for_another_expression(
        target, draft, (context, target_step, draft_step)) or _one_sided(target, draft)


def _one_sided(target: Stated, draft: Stated) -> str | None:
    def states_mathematics(stated: Stated) -> bool:  # a lone number may be a list's ("Step 1")
        return bool(stated.equations or stated.quantities) or stated.numbers >= 2

    def writes_none(stated: Stated) -> bool:  # a formula it cannot read is not nothing
        return not stated.formulas and stated.numbers < 2

    if states_mathematics(target) and writes_none(draft):
        return "only the target's step states mathematics"
    if states_mathematics(draft) and writes_none(target):
        return "only the draft's step states mathematics"
    return None


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


def _same_value_for_another_expression(target: Stated, draft: Stated, texts: tuple[str, ...]) -> str | None:
    if target.equation is None or draft.equation is None:
        return None
    (expression, constant), (other, other_constant) = target.equation, draft.equation
    if any(len(v.samples) != 1 for v in (expression, constant, other, other_constant)):
        return None  # points: not compared here
    if not constant.equals(other_constant) or _near_zero_or_one(constant.samples[0][0]):
        return None
    if _same_function(expression, other):
        return None
    if expression.symbols != other.symbols:
        fewer, more = sorted((expression.symbols, other.symbols), key=len)
        if not fewer or not fewer < more:
            return None
        if any(gives_a_value(text, letter) for letter in more - fewer for text in texts):
            return None  # the letter the other lacks may have been substituted
    if any(_same_function(e, other) and c.equals(other_constant) for e, c in target.equations) or any(
            _same_function(e, expression) and c.equals(constant) for e, c in draft.equations):
        return None  # a step that states both equations
    return "the draft gives the target's value to another expression"


def _near_zero_or_one(z: complex) -> bool:
    return min(abs(z), abs(z - 1), abs(z + 1)) <= 1e-9


def _same_function(a: Value, b: Value) -> bool:
    """Equal at the sample points, whatever letters each names (`a - a + b` is `b`)."""
    return Value(a.samples, slack=a.slack).equals(Value(b.samples, slack=b.slack))


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
            Verdict(False, None, MATH_METHOD) if _disagrees(t, d, context_complex, context) else None
            for t, d in pairs
        ]
        return ask_for_the_rest(self.inner, context, pairs, verdicts)


def _disagrees(target_step: str, draft_step: str, context_complex: bool, context: str) -> bool:
    try:
        return _disagreement(target_step, draft_step, context_complex, context) is not None
    except Exception:  # noqa: BLE001  a step the gate cannot read is the inner verifier's to decide
        return False
