"""The Python API: connect to the three servers once, then run questions."""

from __future__ import annotations

from typing import Callable

from lookahead_reasoning.runtime.baseline import run_baseline
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.servers.connection import Connection
from lookahead_reasoning.runtime.adaptive.cost_model import load_costs, save_costs
from lookahead_reasoning.runtime.servers.endpoints import ROLES, Endpoints
from lookahead_reasoning.runtime.adaptive.depth import make_depth_policy
from lookahead_reasoning.runtime.engine import Engine, make_engine
from lookahead_reasoning.errors import target_failed
from lookahead_reasoning.runtime.results import BaselineResult, LookaheadResult, RoundRecord


class LookaheadReasoner:
    """Lookahead reasoning over SGLang servers.

    >>> reasoner = LookaheadReasoner(Endpoints.from_urls(draft=D, target=T, judge=J), LookaheadConfig(depth=4))
    >>> result = reasoner.run("What is 17 * 23?")
    >>> result.answer, result.stats.acceptance_rate
    """

    def __init__(self, endpoints: Endpoints, config: LookaheadConfig | None = None, remember_costs: bool = False):
        """`remember_costs`: start the adaptive policy from the costs saved for these servers, and save
        what each run teaches it (in the cache folder), so that the next reasoner starts informed."""
        self.config = config or LookaheadConfig()
        self.connection = Connection(endpoints, self.config)
        self.costs_key = server_set_key(endpoints) if remember_costs and self.config.adaptive_depth else None
        costs = load_costs(self.costs_key) if self.costs_key else None
        self.policy = make_depth_policy(self.config, self.config.engine, costs)  # shared by this reasoner's runs

    def engine(self, on_round: Callable[[RoundRecord], None] | None = None) -> Engine:
        """The engine the config names (sync or async), over this connection."""
        return make_engine(
            self.config, self.connection.models, self.connection.verifier, on_round=on_round, policy=self.policy
        )

    def run(self, question: str, on_round: Callable[[RoundRecord], None] | None = None) -> LookaheadResult:
        try:
            return self.engine(on_round).answer(question)
        finally:
            if self.costs_key:
                save_costs(self.costs_key, self.policy.costs)

    def continue_from(self, prompt: str) -> LookaheadResult:
        """Reason on from a prompt already in the target's chat template (used by the `lookahead` program)."""
        return self.engine().continue_from(prompt)

    def baseline(self, question: str) -> BaselineResult:
        return run_baseline(self.connection.models, question, self.config)

    def warm_prompt(self, question: str) -> None:
        """Prefill the question's prompt on the target server (one token is written), so that a run and a
        baseline that follow both find it in the cache: else the first pays the prefill and the second
        does not, which on a CPU is seconds. The verifier's one-off costs are paid here too (a judge server
        compiles its yes/no grammar on its first call, seconds on a CPU), so that the run's first judged
        round does not price the verifier at several times its cost."""
        models = self.connection.models
        try:
            prompt = models.prompt(question)
            models.generate(prompt, 1)
        except Exception as error:
            raise target_failed(error) from None
        try:
            self.connection.verifier.verify(prompt, [("So the total is 4.", "The sum is five.")])
        except Exception:  # noqa: BLE001  a verifier that fails degrades in the run itself, with its message
            pass


def server_set_key(endpoints: Endpoints) -> str:
    """What names a server set for the saved costs: each role's URL and model."""
    specs = {role: getattr(endpoints, role) for role in ROLES}
    return " ".join(f"{role}={spec.url}({spec.model or '?'})" for role, spec in specs.items())
