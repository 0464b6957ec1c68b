"""AR stretches: how many steps an AR round writes in one request.

While AR wins, an AR round writes AR_STRETCH_STEPS steps in one request, as the target alone would; more where
a request's fixed cost o would exceed STRETCH_OVERHEAD of the stretch; about AR_STRETCH_SECONDS at most; never
past a deadline. An answer the drafting slots left out writes the fewest steps that keep o within
RATIONED_OVERHEAD. AR is priced accordingly (`ar_step`): a step of a stretch of k steps takes
1 − (o/S)(1 − 1/k) of a target step S = o + L̄·t₁.
"""

from __future__ import annotations

import math

from lookahead_reasoning.runtime.adaptive.cost_model import CostModel
from lookahead_reasoning.runtime.adaptive.tuning import (
    AR_STRETCH_SECONDS, AR_STRETCH_STEPS, RATIONED_OVERHEAD, STRETCH_OVERHEAD,
)



def stretch(costs: CostModel, seconds_left: float | None = None, rationed: bool = False) -> tuple[int, int]:
    """(steps, token cap) of the next AR round; (1, 0), a lone step, where the costs are not known yet or
    only one step fits. `seconds_left`: a deadline's, which caps the tokens at the target's speed.
    `rationed`: an answer the drafting slots left out (see the module docstring)."""
    step_tokens, s_per_token, overhead = costs.step_figures()
    if not (step_tokens and s_per_token):
        return 1, 0
    step_s = step_tokens * s_per_token
    overhead = overhead or 0.0
    share, least = (RATIONED_OVERHEAD, 1) if rationed else (STRETCH_OVERHEAD, AR_STRETCH_STEPS)
    most = max(least, math.ceil(overhead * (1.0 - share) / (share * step_s)))
    steps = min(most, max(1, math.floor(AR_STRETCH_SECONDS / step_s + 1e-6)))
    if steps == 1:
        return 1, 0
    tokens = steps * max(1, round(step_tokens))
    if seconds_left is not None:
        tokens = max(1, min(tokens, int(seconds_left / s_per_token)))
    return steps, tokens


def ar_step(costs: CostModel, answers: int) -> float:
    """The time of an AR step as stretches write it, over a target step's (see the module docstring)."""
    steps = stretch(costs)[0]
    return 1.0 - costs.request_share(answers) * (1.0 - 1.0 / steps)
