"""What each model is asked: the SGLang frontend programs and their prompt texts.

Every SGLang-frontend call of the project lives in this package.
"""

from lookahead_reasoning.programs.backend import BackendError, LookaheadEndpoint
from lookahead_reasoning.programs.judge import JudgeAnswer, judge
from lookahead_reasoning.programs.lookahead import lookahead, lookahead_turn
from lookahead_reasoning.programs.roles import SGLangStepModels, judge_pairs, render_question
from lookahead_reasoning.programs.step_types import Sampling, StepOutput
from lookahead_reasoning.programs.steps import draft_steps, free_generation, target_steps

SGLangRoles = SGLangStepModels  # the name before 0.2, kept for existing imports

__all__ = [
    "BackendError", "JudgeAnswer", "LookaheadEndpoint", "SGLangRoles", "SGLangStepModels", "Sampling", "StepOutput",
    "draft_steps", "free_generation", "judge", "judge_pairs", "lookahead", "lookahead_turn",
    "render_question", "target_steps",
]
