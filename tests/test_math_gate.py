"""The math gate: the three MATH-500 losses as step pairs, equal mathematics in other forms, and the
gate's promise never to accept a pair its inner verifier rejected."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_reasoning.eval.verifier_study import accepted_at
from lookahead_reasoning.verifiers.base import Verdict
from lookahead_reasoning.verifiers.expressions import evaluate
from lookahead_reasoning.verifiers.latex import latex_to_plain
from lookahead_reasoning.verifiers.math_gate import MATH_METHOD, MathGate, disagreement
from lookahead_reasoning.verifiers.numbers import NumbersGate


class Inner:
    """An inner verifier that accepts what `decide` accepts (everything by default) and records what it was asked."""

    name = "inner"

    def __init__(self, decide=lambda target, draft: True):
        self.decide = decide
        self.asked = []

    def verify(self, context, pairs):
        self.asked += list(pairs)
        return [Verdict(accept, float(accept), "inner") for accept in (self.decide(t, d) for t, d in pairs)]


def numbers_gate_passes(context, target, draft):
    return NumbersGate(Inner()).verify(context, [(target, draft)])[0].accept


def math_gate_rejects(context, target, draft):
    verdict = MathGate(Inner()).verify(context, [(target, draft)])[0]
    return not verdict.accept and verdict.method == MATH_METHOD and verdict.score is None


# --- the three MATH-500 losses (docs/figures.md, the first 25 MATH-500 problems AR finishes) ----------------

HEXAGON = (
    "A regular hexagon can be divided into six equilateral triangles. If the perimeter of one of the triangles "
    "is 21 inches, what is the perimeter, in inches, of the regular hexagon?\n\n"
    "1. **Understand the relationship between the hexagon and the equilateral triangles:**\n"
    "   A regular hexagon can be divided into six equilateral triangles. This means that each side of the "
    "hexagon is equal to the side length of one of the equilateral triangles.\n\n"
    "2. **Determine the side length of the equilateral triangle:**\n"
    "   If each side of the triangle is \\( s \\), we can write the equation:\n   \\[\n   3s = 21\n   \\]\n"
    "   \\[\n   s = \\frac{21}{3} = 7\n   \\]\n\n"
)


def test_a_paraphrase_onto_another_route_states_another_equation():
    """Problem 5: the judge accepted paraphrases that led from the hexagon's six sides to the sum of six
    triangles' perimeters (answer 126 against 42). At the step where the routes part, the draft gives the
    perimeter P another expression in s, with numbers all known, so only the mathematics tells them apart."""
    target = ("3. **Calculate the perimeter of the hexagon:**\n   The hexagon has 6 sides, each equal to a side "
              "of one triangle, so its perimeter is\n   \\[\n   P = 6s\n   \\]\n\n")
    draft = ("3. **Calculate the perimeter of the hexagon:**\n   Since the hexagon is composed of six equilateral "
             "triangles, its perimeter is the sum of their perimeters:\n   \\[\n   P = 6 \\times 3s\n   \\]\n\n")
    assert numbers_gate_passes(HEXAGON, target, draft)
    assert math_gate_rejects(HEXAGON, target, draft)
    assert disagreement(target, draft, HEXAGON) == "the draft gives the quantity in P another value"
    # one step on, where each states its result: 42 against 126
    target, draft = "\\[\n   P = 6 \\times 7 = 42\n   \\]\n\n", "\\[\n   6 \\times 21 = 126\n   \\]\n\n"
    assert math_gate_rejects(HEXAGON, target, draft)


DISTANCE = (
    "What is the distance, in units, between the points $(2, -6)$ and $(-4, 3)$? Express your answer in "
    "simplest radical form.\n\n"
    "2. Substitute the coordinates into the distance formula:\n   \\[\n"
    "   d = \\sqrt{((-4) - 2)^2 + (3 - (-6))^2}\n   \\]\n\n"
)


def test_a_known_number_in_the_wrong_place_changes_the_value():
    """Problem 8: the draft wrote (-6 - 2)^2 for the target's (-4 - 2)^2 (answer sqrt(145) against 3 sqrt(13)).
    Every number of the draft's step is in the context, so the numbers gate lets it through; d is given
    sqrt(145) against sqrt(117)."""
    heading = "3. Simplify the expressions inside the parentheses:\n"
    target = heading + "   \\[\n   d = \\sqrt{(-4 - 2)^2 + (3 + 6)^2}\n   \\]\n\n"
    draft = heading + "   \\[\n   d = \\sqrt{(-6 - 2)^2 + (3 + 6)^2}\n   \\]\n\n"
    assert numbers_gate_passes(DISTANCE, target, draft)
    assert math_gate_rejects(DISTANCE, target, draft)


def test_the_squares_themselves_in_plain_text_state_different_results():
    """The same error with its squares worked out, in plain text. Here the draft's 64 is a new number, so the
    numbers gate rejects the pair too; the math gate rejects it for its result, 64 against 36."""
    target, draft = "Then (-4 - 2)^2 = 36.\n\n", "Then (-6 - 2)^2 = 64.\n\n"
    assert disagreement(target, draft, DISTANCE) == "the draft's result differs from the target's"
    assert not numbers_gate_passes(DISTANCE, target, draft)


ROTATION = ("A $90^\\circ$ rotation around the origin in the counter-clockwise direction is applied to $7 + 2i.$  "
            "What is the resulting complex number?\n\n")


def test_a_wrong_rule_in_words_is_beyond_the_gate_when_the_target_states_its_rule_in_words():
    """Problem 28, the step that lost it: the target says a 90° turn is a multiplication by i, the draft that it
    maps a + bi to -bi - a. Nothing the two steps state can be compared: the target's rule is in words, the
    draft's has letters the target never writes. The gate leaves the pair to the inner verifier. Once the
    rule is accepted, the target's later steps continue from it, so no later pair shows the error either."""
    target = ("To solve the problem of rotating a complex number \\(7 + 2i\\) by \\(90^\\circ\\) counterclockwise "
              "around the origin, we can use the property of complex numbers that a \\(90^\\circ\\) rotation in "
              "the complex plane corresponds to multiplication by \\(i\\).\n\n")
    draft = ("To solve the problem of rotating a complex number \\(7 + 2i\\) by \\(90^\\circ\\) around the origin in "
             "the counter-clockwise direction, we can use the properties of complex numbers. Specifically, a "
             "\\(90^\\circ\\) rotation around the origin transforms a complex number \\(a + bi\\) into \\(-bi - a\\)."
             "\n\n")
    assert disagreement(target, draft, ROTATION) is None
    verdict = MathGate(Inner()).verify(ROTATION, [(target, draft)])[0]
    assert verdict.accept and verdict.method == "inner"


def test_a_wrong_rule_is_caught_where_the_steps_state_what_it_gives():
    # the rule and its result in one step: -2i - 7 against -2 + 7i (numbers all known: 7, 2)
    target = ("A \\(90^\\circ\\) counterclockwise rotation is a multiplication by \\(i\\), so \\(7 + 2i\\) becomes "
              "\\[ (7 + 2i) \\cdot i = 7i + 2i^2 = -2 + 7i \\]\n\n")
    draft = ("A \\(90^\\circ\\) counterclockwise rotation maps \\(a + bi\\) to \\(-bi - a\\), so with \\(a = 7\\) "
             "and \\(b = 2\\): \\[ -bi - a = -2i - 7 \\]\n\n")
    assert numbers_gate_passes(ROTATION, target, draft)
    assert math_gate_rejects(ROTATION, target, draft)
    # the rule written as a rotation of points, in plain text: the points it gives differ
    question = "Where does a 90° counterclockwise rotation about the origin take the point (2, 3)?\n\n"
    target = "Rotating (x, y) by 90° counterclockwise gives (-y, x), so the point becomes (-3, 2).\n\n"
    draft = "Rotating (x, y) by 90° counterclockwise gives (y, -x), so the point becomes (3, -2).\n\n"
    assert numbers_gate_passes(question, target, draft)
    assert math_gate_rejects(question, target, draft)
    # and as a map in LaTeX: the image of (x, y) differs
    assert disagreement("\\[ (x, y) \\mapsto (-y, x) \\]\n\n", "\\[ (x, y) \\mapsto (y, -x) \\]\n\n") == (
        "the draft gives the image of the quantity in x, y another value")


# --- the same value for another expression (MATH-500 pairs the judge accepted) ------------------------------

ANOTHER_EXPRESSION = "the draft gives the target's value to another expression"


@pytest.mark.parametrize("target, draft", [
    # math500-0414-r3-p3 and -r4-p1: the draft dropped the square
    ("Next, divide every term by -4:\n\\[\n(5-a)^2 = \\frac{-36}{-4}\n\\]\n\\[\n(5-a)^2 = 9\n\\]\n\n",
     ("Finally, solve for \\(a\\) by dividing both sides by -4:\n"
      "\\[\n5-a = \\frac{-36}{-4}\n\\]\n\\[\n5-a = 9\n\\]\n\n")),
    ("Now, divide every term by -4:\n\\[\n(5-a)^2 = \\frac{-36}{-4}\n\\]\n\\[\n(5-a)^2 = 9\n\\]\n\n",
     "Now, solve for \\(a\\) by dividing both sides by -4:\n\\[\n5-a = \\frac{-36}{-4}\n\\]\n\\[\n5-a = 9\n\\]\n\n"),
    # math500-0452-r2-p1: the target put 13 (the value of a + b) for a; nothing gives a a value
    (("Since we know from the first equation that \\(a + b = 13\\), we can substitute \\(13\\) for \\(a + b\\) in "
      "the equation \\(9(a - b)\\):\n\\[9(13 - b) = 27.\\]\n\n"), "So the equation becomes:\n\\[9(a - b) = 27.\\]\n\n"),
])
def test_the_same_value_for_another_expression_is_rejected(target, draft):
    context = ("Let's denote the two-digit number by \\(10a + b\\). \\[a + b = 13.\\]\n\n"
               "\\[10a + b - 10b - a = 9a - 9b = 9(a - b).\\]\n\n")
    assert disagreement(target, draft, context) == ANOTHER_EXPRESSION
    assert disagreement(draft, target, context) == ANOTHER_EXPRESSION
    assert math_gate_rejects(context, target, draft)


@pytest.mark.parametrize("target, draft, context", [
    ("\\( x + 2 = 5 \\)\n\n", "\\( 2 + x = 5 \\)\n\n", ""),  # equal as functions
    ("\\[ 9(a - b) = 27 \\]\n\n", "\\[ 9a - 9b = 27 \\]\n\n", ""),
    ("So 2x + 3 = 9.\n\n", "\\[ 9 = 3 + 2x \\]\n\n", ""),  # the constant on either side
    ("\\[ 9 \\times 3 = 27 \\]\n\n", "\\[ 9(a - b) = 27 \\]\n\n", ""),  # a constant on both sides of one
    ("\\[ 6s = 42 \\]\n\n", "\\[ 6x = 42 \\]\n\n", ""),  # other letters: not compared
    ("\\[ 2x - 6 = 0 \\]\n\n", "\\[ x - 3 = 0 \\]\n\n", ""),  # 0, 1, -1: one equation in two forms
    ("\\[ \\frac{x}{y} = 1 \\]\n\n", "\\[ \\frac{y}{x} = 1 \\]\n\n", ""),
    ("\\[ (x - 3)^2 = 0 \\]\n\n", "\\[ x - 3 = 0 \\]\n\n", ""),
    # a step that states two equations, the other in another order
    ("\\[ a + b = 5 \\]\n\\[ 2a - b = 5 \\]\n\n", "\\[ 2a - b = 5 \\]\n\\[ a + b = 5 \\]\n\n", ""),
    ("\\( x + y = 10 \\) and \\( 3x - y = 10 \\)\n\n", "So \\( y + x = 10 \\).\n\n", ""),
    # a substitution: the letter the target lacks has a value, in the context or in a step
    ("\\[ 9(13 - b) = 27 \\]\n\n", "\\[ 9(a - b) = 27 \\]\n\n", "We found \\(a = 13\\).\n\n"),
    ("With \\(a = 13\\): \\[ 9(13 - b) = 27 \\]\n\n", "\\[ 9(a - b) = 27 \\]\n\n", ""),
    ("\\[ 9(13 - b) = 27 \\]\n\n", "\\[ 9(a - b) = 27 \\]\n\n", "So \\(a\\) is 13.\n\n"),
    ("\\[ 2(3) + y = 10 \\]\n\n", "\\[ 2x + y = 10 \\]\n\n", "\\begin{align*} x &= 3 \\end{align*}\n\n"),
])
def test_the_same_value_is_left_to_the_inner_verifier_where_the_equations_may_agree(target, draft, context):
    for t, d in ((target, draft), (draft, target)):
        assert disagreement(t, d, context) is None, (t, d)
        verdict = MathGate(Inner()).verify(context, [(t, d)])[0]
        assert verdict.accept and verdict.method == "inner"


def test_one_equation_in_two_forms_is_not_another_expression_for_the_same_value():
    # 2x = 6 and x = 3 give different values: this rule leaves them be (the result rule compares 6 with 3)
    assert disagreement("\\[ 2x = 6 \\]\n\n", "\\[ x = 3 \\]\n\n") != ANOTHER_EXPRESSION
    assert disagreement("\\[ 2x = 6 \\]\n\\[ x = 3 \\]\n\n", "\\[ x = 3 \\]\n\n") is None


# --- what the gate leaves to the inner verifier ----------------------------------------------------------

SAME = [
    ("So \\( p = \\frac{1}{2} \\).\n\n", "So p = 0.5.\n\n"),
    ("We get x=2+3.\n\n", "We get \\( x = 5 \\).\n\n"),
    ("\\[ d = \\sqrt{(-6)^2 + 9^2} = \\sqrt{117} \\]\n\n", "So d = sqrt(36 + 81) = 3√13.\n\n"),
    ("\\[ d = 3\\sqrt{13} \\]\n\n", "$$d=\\sqrt{117}$$\n\n"),
    ("\\( f(x) = (x + 1)^2 \\)\n\n", "\\( f(x) = x^2 + 2x + 1 \\)\n\n"),
    ("The point becomes \\((-3, 2)\\).\n\n", "The point becomes (-3, 2).\n\n"),
    ("The probability is \\(\\frac{1}{3}\\).\n\n", "The probability is 0.333.\n\n"),
    ("Multiplying: \\[ (7 + 2i) \\cdot i = 7i + 2i^2 = -2 + 7i \\]\n\n",
     "Multiplying by i gives \\(7i - 2\\).\n\n"),
    ("\\[ \\text{Area} = 8 \\text{ cm} \\times 5 \\text{ cm} = 40 \\text{ cm}^2 \\]\n\n",
     "\\[ \\text{Area} = 40 \\]\n\n"),
    ("\\begin{align*} y &= 2(3 + 4) \\\\ &= 14 \\end{align*}\n\n", "So y = 14.\n\n"),
    ("First, 16 - 3 - 4 = 9 eggs are left.\n\n", "She has 16 eggs and uses 3 and 4, so 9 eggs remain.\n\n"),
    ("He pays $15 x 3 = $45 in all.\n\n", "In all he pays 45 dollars.\n\n"),
    ("\\[ y = \\sin^2 x + \\cos^2 x \\]\n\n", "So y = 1.\n\n"),
    ("\\[ k = \\log_2 8 \\]\n\n", "So \\(k = 3\\).\n\n"),
]


@pytest.mark.parametrize("target, draft", SAME)
def test_equal_mathematics_in_other_forms_is_left_to_the_inner_verifier(target, draft):
    assert disagreement(target, draft) is None
    assert disagreement(draft, target) is None


def test_a_draft_that_states_less_or_nothing_comparable_is_left_to_the_inner_verifier():
    # stops at the target's intermediate value
    both = "\\[ s = \\frac{21}{3} = 7, \\quad P = 6 \\times 7 = 42 \\]\n\n"
    assert disagreement(both, "\\[ s = \\frac{21}{3} = 7 \\]\n\n") is None
    # no formulas; one of the target's quantities, in another order; expressions in other letters
    assert disagreement("First, find the side length.\n\n", "We begin with the side of a triangle.\n\n") is None
    assert disagreement("\\( a = 3 \\) and \\( b = 4 \\)\n\n", "\\( b = 4 \\), \\( a = 3 \\)\n\n") is None
    formula = "\\( d = \\sqrt{(x_2 - x_1)^2 + (y_2 - y_1)^2} \\)\n\n"
    assert disagreement(formula, "\\( d = \\sqrt{36 + 81} \\)\n\n") is None
    # a formula the step's token cap cut: its last line states nothing
    assert disagreement("We find \\[ d = \\sqrt{117} \\]\nso d = 1", "\\[ d = \\sqrt{117} \\]\n\n") is None
    # sets, inequalities and lists are not compared
    assert disagreement("\\( x \\in \\{1, 2\\} \\)\n\n", "\\( x \\in \\{1, 3\\} \\)\n\n") is None
    assert disagreement("\\( x > 2 \\)\n\n", "\\( x > 3 \\)\n\n") is None
    assert disagreement("The roots are x = 2, 3.\n\n", "The roots are x = 3, 2.\n\n") is None


def test_a_step_that_states_mathematics_against_one_that_writes_none_is_rejected():
    plan = "To solve this problem, we need to find a two-digit number where we are given two facts:\n\n"
    sets_up = "Let the number be \\(10a + b\\). The digits sum to 13, so\n\\[a + b = 13.\\]\n\n"
    assert disagreement(sets_up, plan) == "only the target's step states mathematics"
    assert disagreement(plan, sets_up) == "only the draft's step states mathematics"
    computes = "The remainder of 2004 divided by 12 is \\(\\boxed{0}\\).\n\n"
    assert disagreement(computes, "Let's do this step by step:\n\n") == "only the target's step states mathematics"
    # both only announce; a list's lone number is no mathematics; a formula it cannot read is not nothing
    assert disagreement(plan, "First, let's find the two digits.\n\n") is None
    assert disagreement("Step 1: find the digits.\n\n", plan) is None
    assert disagreement(sets_up, "We write \\( \\overline{ab} \\) for the number.\n\n") is None


def test_the_parts_it_reads():
    assert latex_to_plain("\\frac{21}{3}") == "((21)/(3))"
    assert evaluate(latex_to_plain("\\left( -4 - 2 \\right)^{2}"), False).samples[0][0] == 36
    assert evaluate("6 * 3s", False).symbols == {"s"}
    i_squared = evaluate(latex_to_plain("2i^2"), True).samples[0][0]
    assert i_squared == -2
    assert evaluate("2i^2", False).symbols == {"i"}  # i is a letter where nothing speaks of complex numbers


def test_a_rejection_counts_as_no_verdict_of_a_model():
    assert not accepted_at(Verdict(False, None, MATH_METHOD), 0.0)


# --- the gate never accepts what its inner verifier rejected ----------------------------------------------

_LETTERS = st.sampled_from(["x", "y", "s", "d", "P"])
_NUMBERS = st.integers(-20, 20).map(str)
_FORMULA = st.one_of(
    st.builds("{} = {} + {}".format, _LETTERS, _NUMBERS, _NUMBERS),
    st.builds("\\( {} = \\frac{{{}}}{{{}}} \\)".format, _LETTERS, _NUMBERS, st.integers(1, 9).map(str)),
    st.builds("({} - {})^2 = {}".format, _NUMBERS, _NUMBERS, _NUMBERS),
    st.builds("\\[ {} = {} {} \\]".format, _LETTERS, _NUMBERS, _LETTERS),
    st.builds("so the point becomes ({}, {})".format, _NUMBERS, _NUMBERS),
)
_STEP = st.one_of(
    st.lists(_FORMULA, min_size=1, max_size=3).map(lambda fs: ". ".join(fs) + ".\n\n"),
    st.text(alphabet="xyd0123456789 =+-*/^()[]{},.\\$fractsqr", max_size=60),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_STEP, _STEP, st.booleans()), min_size=1, max_size=6))
def test_the_gate_never_turns_a_rejection_into_an_acceptance(cases):
    accepts: dict = {}
    for target, draft, accept in cases:
        accepts.setdefault((target, draft), accept)
    inner = Inner(lambda target, draft: accepts[(target, draft)])
    pairs = [(target, draft) for target, draft, _ in cases]
    verdicts = MathGate(inner).verify("", pairs)
    for pair, verdict in zip(pairs, verdicts):
        assert not verdict.accept or accepts[pair], pair
        if verdict.method == MATH_METHOD:
            assert not verdict.accept and verdict.score is None
        else:  # the inner verifier's own verdict, passed on
            assert verdict.method == "inner" and verdict.accept == accepts[pair]
    assert len(inner.asked) == sum(v.method != MATH_METHOD for v in verdicts)  # rejected pairs cost no call


@settings(max_examples=200, deadline=None)
@given(_STEP)
def test_a_step_never_disagrees_with_itself(step):
    assert disagreement(step, step) is None


# --- cheap, bounded, and safe off the main thread --------------------------------------------------------

PATHOLOGICAL = [
    "\\[ " + "(" * 400 + "1" + ")" * 400 + " = 2 \\]\n\n",
    "\\[ x = 9^{9^{9^{9^{9}}}} \\]\n\n",
    "x = 99999^99999 and y = 100000!.\n\n",
    "\\[ x = " + "\\sqrt{" * 200 + "2" + "}" * 200 + " \\]\n\n",
    "x = " + "1" * 5000 + ".\n\n",
    ("\\( a = 1 + 2 \\) " * 3000) + "\n\n",
    "\\[ \\overline{AB} = \\int_0^{10^{9}} e^{x^2} \\, dx = \\sum_{n=1}^{\\infty} n^{n^{n}} \\]\n\n",
    "$" * 500 + "\\(" * 300 + "=" * 300 + "\n\n",
]


def test_pathological_steps_are_read_quickly_and_never_raise():
    started = time.perf_counter()
    for step in PATHOLOGICAL:
        for other in ("\\[ x = 3 \\]\n\n", step):
            assert disagreement(step, other) in (None, "the draft's result differs from the target's")
            verdicts = MathGate(Inner()).verify("", [(step, other), (other, step)])
            assert [v.method for v in verdicts] in (["inner", "inner"], ["math", "math"], ["math", "inner"],
                                                    ["inner", "math"])
    assert time.perf_counter() - started < 10.0  # generous for a shared machine; about 0.1 s alone


def test_latex_beyond_its_own_reader_goes_through_sympy_on_a_worker_thread():
    # \overline is not read here: latex2sympy parses it, with no signal-based timeout (a worker thread has none)
    pairs = [("\\( \\overline{AB} = 5 \\)\n\n", "\\( \\overline{AB} = 7 \\)\n\n"),
             ("\\( \\overline{AB} = 5 \\)\n\n", "\\( \\overline{AB} = 2 + 3 \\)\n\n")]
    with ThreadPoolExecutor(1) as pool:
        verdicts = pool.submit(MathGate(Inner()).verify, "", pairs).result()
    assert [(v.accept, v.method) for v in verdicts] == [(False, MATH_METHOD), (True, "inner")]
