"""Graders: is a model's answer right?

- math: the last `\\boxed{}` answer against the reference, by mathematical equivalence
  (math-verify over sympy), so `\\frac{1}{2}` = `0.5` and `x=3` = `3`;
- number (GSM8K): the boxed answer, or else the last number in the text, compared as a number;
- choice (GPQA): the letter in the box, or after "answer is";
- code (HumanEval): the last Python code block, its function called by the tests from a harness process
  in the sandbox (bubblewrap) that the code cannot reach; right only if that harness proves every test
  passed, with a per-run token on a pipe of its own;
- none (LiveCodeBench here): nothing to grade against;
- judge-score (MT-Bench): a judge model's 1-10 score, given by the caller.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Callable

from lookahead_reasoning.eval.datasets import Problem
from lookahead_reasoning.eval.sandbox import run_tests
from lookahead_reasoning.runtime.answers import last_boxed


@dataclass(frozen=True)
class Grade:
    correct: bool | None  # None: the item has nothing to grade against
    extracted: str | None  # what was read out of the answer
    score: float | None = None  # judge-score's 1-10
    detail: str = ""


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def _timeouts() -> dict:
    """math-verify's timeouts use SIGALRM, which exists only in the main thread."""
    if threading.current_thread() is threading.main_thread():
        return {}
    return {"parsing_timeout": None}


def math_equivalent(reference: str, answer: str) -> bool:
    from math_verify import parse, verify

    gold = parse(f"${reference}$", **_timeouts())
    predicted = parse(f"${answer}$", **_timeouts())
    if not gold or not predicted:
        return False
    timeout = {} if threading.current_thread() is threading.main_thread() else {"timeout_seconds": None}
    return bool(verify(gold, predicted, **timeout))


def grade_math(reference: str, text: str) -> Grade:
    boxed = last_boxed(text)
    if boxed is None:
        return Grade(False, None, detail="no \\boxed{} answer")
    return Grade(math_equivalent(reference, boxed), boxed)


def _as_number(text: str) -> float | None:
    found = _NUMBER.findall(text.replace("\\!", "").replace("{,}", ""))
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


_DECORATION = re.compile(r"\\text\{[^}]*\}|\\mathrm\{[^}]*\}|\\[$%!,]|[$%]|\{,\}")


def grade_number(reference: str, text: str) -> Grade:
    expected = _as_number(reference)
    if expected is None:
        raise ValueError(f"reference answer {reference!r} is not a number")
    boxed = last_boxed(text)
    if boxed is not None:
        cleaned = _DECORATION.sub("", boxed)
        if len(_NUMBER.findall(cleaned)) != 1 or "\\" in cleaned:  # an expression: check equivalence
            return Grade(math_equivalent(reference, boxed), boxed)
        value = _as_number(cleaned)
    else:
        value = _as_number(text)
    if value is None:
        return Grade(False, None, detail="no number in the answer")
    return Grade(abs(value - expected) <= 1e-6 * max(1.0, abs(expected)), boxed if boxed is not None else str(value))


_LETTER = re.compile(r"\b([A-D])\b")
_ANSWER_IS = re.compile(r"answer\s*(?:is\s*:?|:)\s*\(?\**\s*([A-D])\b", re.IGNORECASE)


def grade_choice(reference: str, text: str) -> Grade:
    boxed = last_boxed(text)
    letter = None
    if boxed is not None:
        cleaned = re.sub(r"\\text\{([^}]*)\}", r"\1", boxed)
        match = _LETTER.search(cleaned)
        letter = match.group(1) if match else None
    if letter is None:
        found = _ANSWER_IS.findall(text)
        letter = found[-1].upper() if found else None
    if letter is None:
        return Grade(False, None, detail="no choice letter in the answer")
    return Grade(letter == reference.strip().upper(), letter)


_CODE_BLOCK = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str | None:
    blocks = _CODE_BLOCK.findall(text)
    return blocks[-1] if blocks else None


def humaneval_solution(prompt: str, code: str, entry_point: str) -> str:
    """The candidate's module: a whole function with the prompt's imports; a body appended to the prompt."""
    if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        return f"{_imports(prompt)}\n\n{code}"
    return prompt + code


def humaneval_program(prompt: str, code: str, test: str, entry_point: str) -> str:
    """The solution and its tests as one script, as HumanEval's own harness runs them (grading runs them
    apart: `grade_code`)."""
    return f"{humaneval_solution(prompt, code, entry_point)}\n\n{test}\n\ncheck({entry_point})\n"


def humaneval_setup(prompt: str) -> str:
    """What of the prompt the tests run beside: all of it (helper functions such as `poly` or
    `encode_cyclic` that tests call), where it compiles alone or with a `pass` body; else its imports."""
    for text in (prompt, prompt.rstrip() + "\n    pass\n"):
        try:
            compile(text, "<prompt>", "exec")  # compiled only, never run here
            return text
        except (SyntaxError, ValueError):
            continue
    return _imports(prompt)


def _imports(prompt: str) -> str:
    return "\n".join(line for line in prompt.splitlines() if line.startswith(("import ", "from ")))


def grade_code(problem: Problem, text: str, timeout_s: float = 10.0, unsafe_no_sandbox: bool = False) -> Grade:
    """Right only if every test passed, as the grading harness proves on a pipe of its own (eval/sandbox.py,
    `run_tests`): the tests run in a process the code cannot reach and call its function with plain values;
    code that exits early, prints anything, or answers with an object that claims to equal everything, fails."""
    code = extract_code(text)
    if code is None:
        return Grade(False, None, detail="no code block")
    extra = problem.extra
    result = run_tests(
        humaneval_solution(extra["prompt"], code, extra["entry_point"]), extra["test"], extra["entry_point"],
        setup=humaneval_setup(extra["prompt"]), timeout_s=timeout_s, unsafe_no_sandbox=unsafe_no_sandbox,
    )
    if result.passed:
        return Grade(True, code, detail="passed")
    status = result.status
    if "exited before the tests finished" in result.output:
        status = "failed: exited before the tests finished"
    return Grade(False, code, detail=f"{status}: {result.output[-300:]}")


Scorer = Callable[[str, str, str | None], float | None]  # (question, answer, reference) -> 1..10


def grade(problem: Problem, text: str, scorer: Scorer | None = None, unsafe_no_sandbox: bool = False) -> Grade:
    if problem.grader == "math":
        return grade_math(problem.reference or "", text)
    if problem.grader == "number":
        return grade_number(problem.reference or "", text)
    if problem.grader == "choice":
        return grade_choice(problem.reference or "", text)
    if problem.grader == "code":
        return grade_code(problem, text, unsafe_no_sandbox=unsafe_no_sandbox)
    if problem.grader == "judge-score":
        if scorer is None:
            return Grade(None, None, detail="no judge to score with")
        score = scorer(problem.extra.get("question", problem.message), text, problem.reference)
        return Grade(None, None, score=score, detail="" if score is not None else "the judge gave no usable score")
    return Grade(None, None, detail="no tests to grade against")
