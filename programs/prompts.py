"""Every prompt text the models see, in one place."""

REASONING_INSTRUCTION = (
    "Please reason step by step, separating the steps with a blank line, "
    "and put your final answer within \\boxed{}."
)

# Benchmarks ask multiple-choice and coding questions with their own instruction (eval/datasets.py).
CHOICE_INSTRUCTION = (
    "Please reason step by step, separating the steps with a blank line, and put the letter of the "
    "correct choice (A, B, C or D) within \\boxed{}."
)
CODE_INSTRUCTION = (
    "Think step by step, separating the steps with a blank line, then write the complete solution "
    "in one ```python code block."
)

# The judge's fixed instructions go first (as the system turn), so RadixAttention
# caches them once and every judge call reuses them.
JUDGE_INSTRUCTIONS = (
    "You compare two reasoning steps written for the same problem at the same point. "
    "Do the two reasoning steps below say the same thing: the same idea, the same numbers "
    "and the same result? Wording may differ. Answer yes or no."
)

JUDGE_CHOICES = ("yes", "no")
JUDGE_REGEX = "(yes|no)"


def question_message(question: str) -> str:
    """The user turn that asks a question of a reasoning model."""
    return f"{question.strip()}\n\n{REASONING_INSTRUCTION}"


def judge_message(step_a: str, step_b: str) -> str:
    return f"Step A:\n{step_a.strip()}\n\nStep B:\n{step_b.strip()}\n\nSame meaning? Answer yes or no."

# SpecReason-style step scoring: the target rates the draft's step 0-9 from the
# reasoning so far; it does not see its own version of the step.
STEP_SCORE_INSTRUCTIONS = (
    "You check one step of a step-by-step solution. Rate the proposed next step from 0 to 9: "
    "9 means it is correct and useful, 0 means it is wrong. Answer with one digit."
)
STEP_SCORE_REGEX = "[0-9]"


def step_score_message(context: str, step: str) -> str:
    return (
        f"Reasoning so far:\n{context.strip() or '(none)'}\n\nProposed next step:\n{step.strip()}\n\n"
        "Score from 0 to 9:"
    )


# MT-Bench grading (a single-answer grade in the spirit of FastChat's llm_judge prompt):
# the judge reads the question (and a reference answer where MT-Bench has one) and
# answers with a score from 1 to 10.
ANSWER_SCORE_INSTRUCTIONS = (
    "You are an impartial judge. Rate the quality of the assistant's answer to the user's question: "
    "its helpfulness, relevance, accuracy, depth and level of detail. Where a reference answer is "
    "given, correctness against it matters most. Answer with one score from 1 to 10."
)
ANSWER_SCORE_REGEX = "(10|[1-9])"


def answer_score_message(question: str, answer: str, reference: str | None) -> str:
    parts = [f"[Question]\n{question.strip()}"]
    if reference:
        parts.append(f"[Reference answer]\n{reference.strip()}")
    parts.append(f"[Assistant's answer]\n{answer.strip()}")
    parts.append("Score from 1 to 10:")
    return "\n\n".join(parts)
