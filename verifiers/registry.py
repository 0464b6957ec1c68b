"""Verifiers by name, with their default thresholds, and the threshold a run uses."""

from __future__ import annotations

from itertools import combinations

from lookahead_reasoning.verifiers.base import ExactMatchVerifier, FastPathVerifier, Verifier
from lookahead_reasoning.verifiers.calibration import load_calibration
from lookahead_reasoning.verifiers.math_gate import MATH_METHOD, MathGate
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
# Gates, named after NAME in this order: NAME+numbers, NAME+math, NAME+numbers+math, at NAME's default
# threshold. A gate rejects some pairs before NAME is asked and leaves NAME the rest: the numbers gate
# (verifiers/numbers.py) a draft step that states a number nobody wrote before, the math gate
# (verifiers/math_gate.py) one whose equations or result disagree with the target's step.
# Not for exact (equal steps state equal mathematics) nor embedding-numbers (it compares numbers itself).
GATES = {GATE_METHOD: NumbersGate, MATH_METHOD: MathGate}
GATE_METHODS = tuple(GATES)  # the Verdict.method of a pair a gate rejected: no model was asked
GATED = ("llm-judge", "embedding", "target-score", "random")
GATE_SUFFIXES = tuple("".join("+" + gate for gate in chosen)
                      for size in range(1, len(GATES) + 1) for chosen in combinations(GATES, size))
DEFAULT_THRESHOLDS.update({name + gates: DEFAULT_THRESHOLDS[name] for name in GATED for gates in GATE_SUFFIXES})
VERIFIER_NAMES = tuple(DEFAULT_THRESHOLDS)  # what the config accepts and the CLI lists
UNSCORED = ("exact", "random")  # fixed behaviour: no score to put a threshold on


def base_verifier(name: str) -> str:
    """The verifier behind the gates, or `name` itself."""
    return name.partition("+")[0]


def gates_of(name: str) -> tuple[str, ...]:
    """The gates `name` puts in front of its verifier, in the order it names them."""
    return tuple(name.split("+")[1:])


def unknown_verifier(name: str) -> str:
    return f"unknown verifier {name!r}; known: {', '.join(VERIFIER_NAMES)}"


def verifiers_help() -> str:
    """The verifier names, for the help of every --verifier option."""
    plain = [name for name in VERIFIER_NAMES if not gates_of(name)]
    gated = [name for name in VERIFIER_NAMES if gates_of(name)]
    return (f"{', '.join(plain)}; {', '.join(gated)}: behind the numbers gate (a new number rejects), "
            "the math gate (equations or a result that disagree reject) or both")


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
    """The named verifier behind its gates (the last named is asked first); with `fast_path`, steps equal
    after normalization skip it (and the gates)."""
    if name not in DEFAULT_THRESHOLDS:
        raise ValueError(unknown_verifier(name))
    value = resolve_threshold(name, threshold, verifier_model(name, judge_backend, target_backend, embedding_model))
    base = base_verifier(name)
    verifier = _base_verifier(base, value, judge_backend, target_backend, embedding_model, seed)
    for gate in gates_of(name):
        verifier = GATES[gate](verifier)
    if base in UNSCORED:  # exact needs no fast path; random accepts at random, full stop
        return verifier
    return FastPathVerifier(verifier) if fast_path else verifier


def _base_verifier(name: str, value: float, judge_backend, target_backend, embedding_model, seed) -> Verifier:
    if name == "exact":
        return ExactMatchVerifier()
    if name == "llm-judge":
        from lookahead_reasoning.verifiers.llm_judge import LLMJudgeVerifier  # imports SGLang

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
