"""Graders: math equivalence, GSM8K numbers, GPQA letters, HumanEval in the sandbox, MT-Bench dispatch."""

import pytest

from lookahead_reasoning.eval.datasets import Problem
from lookahead_reasoning.eval.graders import (
    extract_code,
    grade,
    grade_choice,
    grade_math,
    grade_number,
    humaneval_program,
    math_equivalent,
)


@pytest.mark.parametrize(
    "reference, answer",
    [
        ("\\frac{1}{2}", "0.5"),
        ("0.5", "\\frac{1}{2}"),
        ("3", "x=3"),
        ("x=3", "3"),
        ("\\frac{\\pi}{2}", "\\pi/2"),
        ("18", "18.0"),
        ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}"),
        ("10\\%", "10"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)"),
    ],
)
def test_equivalent_math_answers(reference, answer):
    assert math_equivalent(reference, answer)


@pytest.mark.parametrize("reference, answer", [("\\frac{1}{2}", "0.25"), ("3", "x=4"), ("(1,2)", "(2,1)"), ("18", "81")])
def test_different_math_answers(reference, answer):
    assert not math_equivalent(reference, answer)


def test_math_reads_the_last_box_and_needs_one():
    text = "First \\boxed{2}, then on reflection the answer is \\boxed{\\frac{1}{2}}."
    assert grade_math("0.5", text).correct
    assert grade_math("0.5", text).extracted == "\\frac{1}{2}"
    missing = grade_math("0.5", "the answer is 0.5")
    assert missing.correct is False and "boxed" in missing.detail


@pytest.mark.parametrize(
    "text, correct",
    [
        ("So she makes \\boxed{18} dollars.", True),
        ("\\boxed{\\$18.00}", True),
        ("\\boxed{1,018}", False),
        ("She earns 9 * 2 = 18 dollars a day.", True),  # no box: the last number
        ("She earns 9 * 2 = 18 dollars, minus 1 is 17.", False),
        ("I do not know.", False),
        ("\\boxed{\\frac{36}{2}}", True),  # no plain number in the box: equivalence
    ],
)
def test_gsm8k_by_number(text, correct):
    assert grade_number("18", text).correct is correct


def test_gsm8k_thousands():
    assert grade_number("1018", "\\boxed{1,018}").correct


@pytest.mark.parametrize(
    "text, letter",
    [
        ("... so \\boxed{B}", "B"),
        ("\\boxed{\\text{(C)}}", "C"),
        ("Therefore, the answer is (D).", "D"),
        ("The answer is: A", "A"),
    ],
)
def test_gpqa_by_letter(text, letter):
    result = grade_choice(letter, text)
    assert result.correct and result.extracted == letter
    assert grade_choice("A" if letter != "A" else "B", text).correct is False


def test_gpqa_without_a_letter_is_wrong():
    assert grade_choice("A", "I cannot tell.").correct is False


HUMANEVAL = Problem(
    id="HumanEval/x",
    message="Complete add.",
    grader="code",
    extra={
        "prompt": "import math\n\n\ndef add(a: int, b: int) -> int:\n    \"\"\"Add two numbers.\"\"\"\n",
        "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
        "entry_point": "add",
    },
)


def test_humaneval_whole_function_and_body():
    whole = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```"
    assert grade(HUMANEVAL, whole).correct
    body = "```python\n    return a + b\n```"
    assert grade(HUMANEVAL, body).correct
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    result = grade(HUMANEVAL, wrong)
    assert result.correct is False and "failed" in result.detail
    assert grade(HUMANEVAL, "no code here").correct is False


def test_humaneval_program_keeps_the_prompts_imports():
    program = humaneval_program(HUMANEVAL.extra["prompt"], "def add(a, b):\n    return math.floor(a + b)\n",
                                HUMANEVAL.extra["test"], "add")
    assert program.startswith("import math") and program.rstrip().endswith("check(add)")
    assert extract_code("```\nx = 1\n```\ntext\n```python\ny = 2\n```") == "y = 2\n"


def test_ungraded_and_judge_scored():
    lcb = Problem(id="lcb-1", message="q", grader="none")
    assert grade(lcb, "anything").correct is None
    mt = Problem(id="81", message="Write a poem.", grader="judge-score", extra={"question": "Write a poem."})
    seen = []

    def scorer(question, answer, reference):
        seen.append((question, answer, reference))
        return 7.0

    result = grade(mt, "roses", scorer)
    assert result.correct is None and result.score == 7.0
    assert seen == [("Write a poem.", "roses", None)]
    assert grade(mt, "roses").score is None
