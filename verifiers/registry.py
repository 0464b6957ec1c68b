"""Verifiers by name, with their default thresholds, and the threshold a run uses."""

from __future__ import annotations

from lookahead_reasoning.verifiers.base import ExactMatchVerifier, FastPathVerifier, Verifier
from lookahead_reasoning.verifiers.calibration import load_calibration
from lookahead_reasoning.verifiers.llm_judge import LLMJudgeVerifier
from lookahead_reasoning.verifiers.numbers import GATE_METHOD, NumbersGate

# Scores lie in [0, 1]; a pair is accepted when its score >= the threshold (random: with that probability).
DEFAULT_THRESHOLDS = {
    "exact": 1.0,
    "llm-judge": 0.8,  # P(yes)
    "embedding": 0.85,  # cosine (the paper's ablation tried 0.85 and 0.95)
    "embedding-numbers": 0.6,  # cosine, 0 when the numbers differ
    "random": 0.5,  # acceptance probability
    "target-score": 7 / 9,  # "7 or more" on the 0-9 scale
}
# NAME+numbers: NAME behind the numbers gate (verifiers/numbers.py), at NAME's default threshold.
# Not for exact (equal steps state equal numbers) nor embedding-numbers (it compares numbers itself).
GATE_SUFFIX = "+" + GATE_METHOD
GATED = ("llm-judge", "embedding", "target-score", "random")
DEFAULT_THRESHOLDS.update({name + GATE_SUFFIX: DEFAULT_THRESHOLDS[name] for name in GATED})
VERIFIER_NAMES = tuple(DEFAULT_THRESHOLDS)
UNSCORED = ("exact", "random")  # fixed behaviour: no score to put a threshold on


def base_verifier(name: str) -> str:
    """The verifier behind the numbers gate, or `name` itself."""
    return name.removesuffix(GATE_SUFFIX)


def has_score(name: str) -> bool:
    return base_verifier(name) not in UNSCORED


def _model_of(backend) -> str | None:
    info = getattr(backend, "model_info", None) or {}
    return info.get("model_path")


def verifier_model(name: str, judge_backend=None, target_backend=None, embedding_model: str | None = None) -> str | None:
    """What a calibration of `name` is tied to: the judging model."""
    name = base_verifier(name)
    if name == "llm-judge":
        return _model_of(judge_backend)
    if name == "target-score":
        return _model_of(target_backend)
    if name in ("embedding", "embedding-numbers"):
        from lookahead_reasoning.verifiers.embedding import default_embedding_model

        return str(embedding_model or default_embedding_model())
    return None


def threshold_and_source(name: str, threshold: float | None, model: str | None) -> tuple[float, str]:
    """An explicit threshold wins; then a saved calibration for this verifier and model; then the default.

    The source says which: "given", "calibrated on <pairs file>" or "default".
    """
    if threshold is not None:
        return threshold, "given"
    calibration = load_calibration(name, model)
    if calibration:
        return calibration.threshold, f"calibrated on {calibration.pairs}"
    return DEFAULT_THRESHOLDS[name], "default"


def resolve_threshold(name: str, threshold: float | None, model: str | None) -> float:
    return threshold_and_source(name, threshold, model)[0]


def make_verifier(
    name: str,
    threshold: float | None = None,
    judge_backend=None,
    target_backend=None,
    embedding_model: str | None = None,
    seed: int | None = 0,
    fast_path: bool = True,
) -> Verifier:
    """The named verifier; with `fast_path`, steps equal after normalization skip it (and the gate)."""
    if name not in DEFAULT_THRESHOLDS:
        raise ValueError(f"unknown verifier {name!r}; known: {', '.join(VERIFIER_NAMES)}")
    value = resolve_threshold(name, threshold, verifier_model(name, judge_backend, target_backend, embedding_model))
    base = base_verifier(name)
    verifier = _base_verifier(base, value, judge_backend, target_backend, embedding_model, seed)
    if base != name:
        verifier = NumbersGate(verifier)
    if base in UNSCORED:  # exact needs no fast path; random accepts at random, full stop
        return verifier
    return FastPathVerifier(verifier) if fast_path else verifier


def _base_verifier(name: str, value: float, judge_backend, target_backend, embedding_model, seed) -> Verifier:
    if name == "exact":
        return ExactMatchVerifier()
    if name == "llm-judge":
        return LLMJudgeVerifier(judge_backend, value)
    if name == "target-score":
        from lookahead_reasoning.verifiers.target_score import TargetScoreVerifier

        return TargetScoreVerifier(target_backend, value)
    if name == "random":
        from lookahead_reasoning.verifiers.random_accept import RandomVerifier

        return RandomVerifier(value, seed)
    from lookahead_reasoning.verifiers.embedding import EmbeddingVerifier, NumberAwareEmbeddingVerifier

    cls = EmbeddingVerifier if name == "embedding" else NumberAwareEmbeddingVerifier
    return cls(value, embedding_model)
