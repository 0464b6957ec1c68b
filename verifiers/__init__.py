"""Who decides whether a draft step means the same as the target's step.

The names below load on first use: the LLM judge's module imports SGLang.
"""

import importlib

_API = {
    "ExactMatchVerifier": "base", "FastPathVerifier": "base", "Verdict": "base", "Verifier": "base",
    "normalize_step": "base", "LLMJudgeVerifier": "llm_judge", "NumbersGate": "numbers", "MathGate": "math_gate",
}

__all__ = sorted(_API)


def __getattr__(name):
    if name in _API:
        return getattr(importlib.import_module(f"{__name__}.{_API[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
