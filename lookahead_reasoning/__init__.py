"""Lookahead Reasoning (arXiv 2506.19830) on SGLang.

Subpackages: `programs` (SGLang frontend programs), `verifiers` (step equivalence),
`runtime` (engines and policy; `runtime.servers`: server specs, starting, supervision and the
connection; `runtime.serve`: the OpenAI-compatible frontend), `eval` (datasets, graders, reports),
`cli` (the `lookahead` command).

The names below are the Python API; they load on first use, since importing them
imports SGLang.
"""

__version__ = "0.1.0"

_API = {
    "LookaheadReasoner": "lookahead_reasoning.runtime.reasoner",
    "LookaheadConfig": "lookahead_reasoning.runtime.config",
    "SamplingConfig": "lookahead_reasoning.runtime.config",
    "Endpoints": "lookahead_reasoning.runtime.servers.endpoints",
    "ServerAddress": "lookahead_reasoning.runtime.servers.endpoints",
    "LaunchSpec": "lookahead_reasoning.runtime.servers.specs",
    "RoleSpec": "lookahead_reasoning.runtime.servers.specs",
    "ServerGroup": "lookahead_reasoning.runtime.servers.starting",
    "LookaheadResult": "lookahead_reasoning.runtime.results",
    "LookaheadError": "lookahead_reasoning.errors",
}

__all__ = list(_API)


def __getattr__(name):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'lookahead_reasoning' has no attribute {name!r}")
