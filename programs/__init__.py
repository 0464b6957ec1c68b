"""What each model is asked: the SGLang frontend programs and their prompt texts.

Every SGLang-frontend call of the project lives in this package. The names below load on
first use, so that `programs.step_types` and `programs.prompts` import without SGLang.
"""

import importlib

_API = {
    "BackendError": "backend", "LookaheadEndpoint": "backend",
    "JudgeAnswer": "judge", "judge_pairs": "judge",
    "lookahead": "lookahead", "lookahead_turn": "lookahead",
    "SGLangStepModels": "roles", "render_question": "roles",
    "Sampling": "step_types", "StepOutput": "step_types",
    "continue_texts": "steps", "draft_steps": "steps", "free_generation": "steps", "target_steps": "steps",
}
__all__ = sorted(_API)


def __getattr__(name):
    if name in _API:
        return getattr(importlib.import_module(f"{__name__}.{_API[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
