"""Who decides whether a draft step means the same as the target's step."""

from lookahead_reasoning.verifiers.base import (
    ExactMatchVerifier,
    FastPathVerifier,
    Verdict,
    Verifier,
    normalize_step,
)
from lookahead_reasoning.verifiers.llm_judge import LLMJudgeVerifier

__all__ = ["ExactMatchVerifier", "FastPathVerifier", "LLMJudgeVerifier", "Verdict", "Verifier", "normalize_step"]
