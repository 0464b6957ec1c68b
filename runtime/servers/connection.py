"""Connecting to the servers of an endpoints file: backends, bound programs and the verifier."""

from __future__ import annotations

from lookahead_reasoning.programs.backend import BackendError, LookaheadEndpoint
from lookahead_reasoning.programs.roles import SGLangStepModels
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.servers.endpoints import ROLES, ServerAddress, Endpoints
from lookahead_reasoning.runtime.servers.heap import freeze_startup_objects
from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.verifiers.base import Verifier
from lookahead_reasoning.verifiers.registry import make_verifier

Backends = dict[str, LookaheadEndpoint]  # role -> backend


def role_timeouts(config: LookaheadConfig) -> dict[str, float]:
    """Seconds one request to each role's server may take. The draft and judge get less than the
    target: when they stall, the run degrades to target steps long before the request's deadline."""
    helper = config.request_timeout_s / 4
    return {
        "draft": config.draft_timeout_s or helper,
        "target": config.request_timeout_s,
        "judge": config.verifier_timeout_s or helper,
    }


class Connection:
    """Backends for the three roles (shared where roles share a URL and timeout), programs and verifier.

    Backends are thread-safe and shared; `step_models(config)` and `verifier_for(config)` are
    cheap, so a server can bind per-request settings (temperature, top_p) to them. A request
    with a seed of its own runs on `seeded(seed)`: views of the same backends with that seed.
    """

    def __init__(self, endpoints: Endpoints, config: LookaheadConfig):
        backends: dict[tuple[str, str | None, float], LookaheadEndpoint] = {}
        self.backends: dict[str, LookaheadEndpoint] = {}
        timeouts = role_timeouts(config)
        for role in ROLES:
            spec: ServerAddress = getattr(endpoints, role)
            key = (spec.url, spec.chat_template, timeouts[role])
            if key not in backends:
                try:
                    backends[key] = LookaheadEndpoint(
                        spec.url,
                        chat_template=spec.chat_template,
                        timeout_s=timeouts[role],
                        seed=config.seed,
                    )
                except BackendError as error:
                    raise LookaheadError(f"{role} server: {error}") from None
                except (KeyError, ValueError) as error:  # unknown chat template name
                    raise LookaheadError(f"{role} server: {error}") from None
            self.backends[role] = backends[key]
        self.models = self.step_models(config)
        self.verifier = self.verifier_for(config)
        freeze_startup_objects()  # heap.py: full collections do not walk SGLang's and torch's objects

    def seeded(self, seed: int | None) -> Backends:
        """role -> a view of its backend that sends `seed` (as SGLang's sampling_seed when sampling),
        with sample counts of its own: the same seed and request give the same seeds, whatever
        else runs at the time. Roles that share a backend share its view."""
        views: dict[int, LookaheadEndpoint] = {}
        for backend in self.backends.values():
            if id(backend) not in views:
                views[id(backend)] = backend.with_seed(seed)
        return {role: views[id(backend)] for role, backend in self.backends.items()}

    def step_models(self, config: LookaheadConfig, backends: Backends | None = None) -> SGLangStepModels:
        """The programs bound to these backends (or `backends`, e.g. `seeded(...)`) with `config`'s
        step and sampling settings."""
        backends = backends or self.backends
        return SGLangStepModels(
            draft=backends["draft"],
            target=backends["target"],
            delimiter=config.delimiter,
            max_step_tokens=config.max_step_tokens,
            draft_sampling=config.draft_sampling.to_program(),
            target_sampling=config.target_sampling.to_program(),
            tree_sampling=config.tree_sampling.to_program(),
        )

    def verifier_for(self, config: LookaheadConfig, backends: Backends | None = None) -> Verifier:
        backends = backends or self.backends
        try:
            return make_verifier(
                config.verifier, config.verifier_threshold, judge_backend=backends["judge"],
                target_backend=backends["target"], embedding_model=config.embedding_model, seed=config.seed,
            )
        except (ValueError, OSError) as error:
            raise LookaheadError(f"verifier {config.verifier}: {error}") from None
