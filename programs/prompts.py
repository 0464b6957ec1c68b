"""Every prompt text the models see, in one place."""

REASONING_INSTRUCTION = (
    "Please reason step by step, separating the steps with a blank line, "
    "and put your final answer within \\boxed{}."
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
