"""AR stretches (runtime/adaptive/stretches.py): how many steps an AR round writes in one request."""

import pytest

from lookahead_reasoning.runtime.adaptive.depth import AdaptiveDepth
from lookahead_reasoning.runtime.adaptive.stretches import (
    AR_STRETCH_SECONDS, AR_STRETCH_STEPS, RATIONED_OVERHEAD, stretch,
)
from scripted_rounds import TOKENS, T, learn, round_record


def test_while_ar_wins_ar_rounds_write_several_steps_in_one_request():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    learn(policy, float, rounds=40)  # B(n) = n: AR wins; a step takes 20 tokens × 0.05 s = 1 s
    plans = []
    for _ in range(40):
        plans.append(policy.next_round())
        policy.observe(round_record(0, 0, 0, branch_cost=float, probe=plans[-1].probe_tokens,
                                    stretch=plans[-1].stretch_tokens))
    stretches = [p.stretch_tokens // TOKENS for p in plans if p.stretch_tokens]
    # as many steps as fit in AR_STRETCH_SECONDS, at most AR_STRETCH_STEPS, and never past the next probe
    assert stretches and max(stretches) == min(AR_STRETCH_STEPS, int(AR_STRETCH_SECONDS / (TOKENS * T)))
    assert max(stretches) < policy.probes.spacing(policy.estimates())
    # never cut short to meet a probe's turn (the probe comes a little late): a request's fixed cost for a
    # few steps, and under many answers sharing the count, every answer's stretch would be cut near the turn
    assert set(stretches) == {max(stretches)}
    assert all(p.stretch_tokens == 0 for p in plans if p.probe_tokens)  # a probe round is one step
    assert policy.costs.estimate().step_tokens == pytest.approx(TOKENS)


def test_where_a_request_costs_as_much_as_a_step_ar_stretches_grow_to_keep_that_cost_small():
    """A client short of CPU (many answers): every request pays about a step's time before its tokens. Eight
    steps per stretch would spend 11 % of the time on that; the stretch grows until it is 2 %."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    learn(policy, float, rounds=40)  # AR wins; requests have no fixed cost yet
    assert stretch(policy.costs)[0] == AR_STRETCH_STEPS
    for steps in [2, 4, 8, 3, 6, 8, 5, 7] * 25:  # stretches of several lengths, each paying o = 1 s (a step's time)
        policy.costs.observe_target(1, 1.0 + steps * TOKENS * T, steps * TOKENS, steps=steps)
    estimate = policy.costs.estimate()
    assert estimate.request_overhead_s == pytest.approx(1.0, rel=0.1)
    steps, tokens = stretch(policy.costs)
    assert steps > AR_STRETCH_STEPS and tokens == steps * round(estimate.step_tokens)
    step_s = estimate.step_tokens * estimate.target_s_per_token
    assert estimate.request_overhead_s / (estimate.request_overhead_s + steps * step_s) <= 0.02 + 1e-9
    assert steps * step_s <= AR_STRETCH_SECONDS + 1e-9
    # an answer the drafting slots left out asks again sooner: the fewest steps that keep o within 4 %
    rationed = stretch(policy.costs, rationed=True)[0]
    share = lambda k: estimate.request_overhead_s / (estimate.request_overhead_s + k * step_s)  # noqa: E731
    assert rationed < steps and share(rationed) <= RATIONED_OVERHEAD < share(rationed - 1)


def test_a_stretch_is_at_most_about_a_minute_long():
    """A slow target (20-token steps at 1 s a token): a stretch of AR_STRETCH_STEPS would take 160 s; it writes
    what fits in AR_STRETCH_SECONDS, so that deadlines and cancellation stay responsive."""
    from lookahead_reasoning.runtime.adaptive.cost_model import CostModel

    costs = CostModel()
    for tokens in (20, 20, 20):
        costs.observe_target(1, tokens * 1.0, tokens)
    steps, tokens = stretch(costs)
    assert steps == int(AR_STRETCH_SECONDS / 20) == 3 and tokens == 60
