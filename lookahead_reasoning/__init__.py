"""Lookahead Reasoning (arXiv 2506.19830) on SGLang.

Subpackages: `programs` (SGLang frontend programs), `verifiers` (step equivalence),
`runtime` (engines, launcher, CLI), `eval` (answers, datasets, reports).
"""

__version__ = "0.1.0"
