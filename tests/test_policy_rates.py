"""The measured rates (runtime/adaptive/rates.py): drafting rounds against AR rounds, the last word over the model."""

import pytest

from lookahead_reasoning.runtime.adaptive.depth import AdaptiveDepth
from lookahead_reasoning.runtime.adaptive.rates import MeasuredRates
from lookahead_reasoning.runtime.adaptive.tuning import AR_STRETCH_STEPS
from scripted_rounds import TOKENS, T, learn, round_record, timed


@pytest.mark.parametrize("slowdown, probe_at_plan", [(2.0, False), (1.1, True), (1 / 1.02, True)])
def test_rounds_that_measure_slower_than_ar_win_over_the_model(slowdown, probe_at_plan):
    """The model says drafting pays (free branches), but the drafting rounds advance `slowdown` times slower
    than AR rounds (say the client runs out of CPU), or barely faster (2 %, under GAIN_TO_DRAFT: the rates
    lean toward drafting, and its slowest requests lose more): the policy runs AR, and drafts again when its drafted
    probes measure fast rounds. The probes run the model's γ (what the rates must measure again), unless
    such a round would lose more than the probe budget spreads over the longest spacing: then one step."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    free = lambda n: 1.0  # noqa: E731
    learn(policy, free)
    planned = policy.cost_estimate().planned_depth
    assert planned >= 3 and policy.rates.gain() is None

    for _ in range(3):
        policy.observe(timed(0, T))
        policy.observe(timed(3, slowdown * T))
    # every draft accepted, α̂ just under 1: a round counts what its shape keeps on average at α̂ (1 % less)
    assert policy.rates.gain() == pytest.approx(1 / slowdown, rel=0.02)
    estimate = policy.cost_estimate()
    assert estimate.planned_depth == 0 and estimate.measured_gain == pytest.approx(1 / slowdown, rel=0.02)
    for _ in range(60):  # however many AR rounds go by, the measurement stands until probes measure again
        policy.observe(timed(0, T))
    assert policy.rates.gain() == pytest.approx(1 / slowdown, rel=0.02)
    assert policy.cost_estimate().planned_depth == 0
    probes = []
    for _ in range(60):
        plan = policy.next_round()
        if plan.depth:
            probes.append(plan.depth)
            policy.observe(timed(plan.depth, slowdown * T))
        else:  # AR stretches, which the probes are spaced by
            policy.observe(round_record(0, 0, 0, branch_cost=free, stretch=plan.stretch_tokens))
    # at half speed a round of γ = 8 (9 steps) loses 9 AR steps, more than 2 % of the longest spacing (8)
    assert probes and all(depth == (planned if probe_at_plan else 1) for depth in probes)
    for _ in range(30):
        policy.observe(timed(1, T / 1.5))  # the load is gone: drafting rounds are fast again
    assert policy.cost_estimate().planned_depth >= 3


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_measured_rates_count_a_fork_rounds_cost_not_its_luck(mode):
    """Sync rounds of γ = 3 cost the same whatever their verdicts. Two that kept one step each (rejected at the
    first draft) and two that kept four read 4× apart in tokens per second; what the rates count is what a
    round of that shape keeps on average at α̂, so both read alike, and a few unlucky rounds cannot overrule
    a model that drafts. The async chain pipeline's round runs on while its drafts are accepted,
    so its time grows with its luck: it counts what it kept."""
    gains = []
    for kept_steps in (1, 4):
        policy = AdaptiveDepth(mode, initial=2, max_depth=8)
        learn(policy, lambda n: 1.0)
        policy.rates = MeasuredRates()
        for _ in range(2):
            policy.observe(timed(0, T))
            lucky = timed(3, T)  # 4 steps in 4 step-times
            policy.observe(lucky.model_copy(update={"kept": lucky.kept[:kept_steps],
                                                    "output_tokens": kept_steps * TOKENS}))
        gains.append(policy.rates.gain())
    if mode == "sync":
        assert gains[0] == pytest.approx(gains[1], rel=1e-6) and gains[0] > 0.9
    else:
        assert gains[1] == pytest.approx(4 * gains[0], rel=1e-6)


def test_a_round_that_ends_its_problem_counts_what_it_kept():
    """The end of the problem, not its verdicts, cut a sync round short: it counts the step it kept."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    learn(policy, lambda n: 1.0)
    policy.rates = MeasuredRates()
    for _ in range(2):
        policy.observe(timed(0, T))
        last = timed(3, T)  # 4 steps in 4 step-times, but the problem ended after one
        policy.observe(last.model_copy(update={"kept": last.kept[:1], "output_tokens": TOKENS, "finished": True}))
    assert policy.rates.gain() == pytest.approx(0.25)


def _slow_drafting_verdict(policy):
    """Free branches learned, then tens of drafting rounds measured 3× slower than AR rounds: AR."""
    learn(policy, lambda n: 1.0)
    for _ in range(40):
        policy.observe(timed(0, T))
        policy.observe(timed(3, 3 * T))
    assert policy.cost_estimate().planned_depth == 0


def test_after_slow_drafting_rounds_one_fast_probe_of_an_answer_alone_renews_the_measured_rate():
    """Tens of drafting rounds that measured slow (under load) must not keep one answer at AR through probe after
    probe once drafting is fast again: a drafted probe after AR rounds outweighs them (else `lookahead
    serve` stays at AR long after the load has gone)."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    _slow_drafting_verdict(policy)
    probes = 0
    for _ in range(400):
        plan = policy.next_round()
        if not plan.depth:  # AR stretches, which the probes are spaced by
            policy.observe(timed(0, T, stretch=plan.stretch_tokens))
            continue
        probes += 1
        policy.observe(timed(plan.depth, T / 1.5))  # the load is gone: drafting is fast again
        if policy.cost_estimate().planned_depth:
            break
    assert policy.cost_estimate().planned_depth >= 1 and probes == 1

    # one probe that reads no faster than AR does not undo a clear verdict on its own
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    _slow_drafting_verdict(policy)
    for _ in range(40):
        policy.observe(timed(0, T, stretch=AR_STRETCH_STEPS * TOKENS))
    policy.observe(timed(1, T))
    assert policy.cost_estimate().planned_depth == 0


def test_with_other_answers_in_flight_a_probe_adds_to_the_drafting_rate():
    """A probe among 16 answers at AR is a lone drafted round, which gets more than its share of the server and
    reads fast: it adds to the rate like any round (were it to renew the rate, all 16 answers would draft
    after each probe)."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    _slow_drafting_verdict(policy)
    for _ in range(16):
        policy.answer_started()
    for _ in range(3 * 16):  # three AR stretches of each answer
        policy.observe(timed(0, T, stretch=AR_STRETCH_STEPS * TOKENS))
    policy.observe(timed(3, T / 1.5))
    assert policy.cost_estimate().planned_depth == 0


def test_the_gain_needs_two_timed_rounds_of_each_kind():
    rates = MeasuredRates()
    for _ in range(2):
        assert rates.gain() is None
        rates.add("ar", 20, 1.0, 0.9, answers=1)
        rates.add("draft", 40, 1.0, 0.9, answers=1)
    assert rates.gain() == pytest.approx(2.0)  # aging scales a rate's tokens and seconds alike


@pytest.mark.parametrize("answers", [1, 2])
def test_an_answer_alone_renews_an_aged_drafting_rate_with_its_next_drafting_round(answers):
    """Drafting measured at half AR's rate, then ten AR rounds (the drafting rate ages below STALE_RENEW), then a
    drafting round at twice AR's rate. An answer alone: what the rate held counts half that round's time, so the gain
    reads (5 + 40) / (0.5 + 1) tokens a second over AR's 20: 1.5. Among other answers it adds like any round."""
    rates = MeasuredRates()
    for _ in range(2):
        rates.add("draft", 10, 1.0, 0.9, answers)
        rates.add("ar", 20, 1.0, 0.9, answers)
    for _ in range(10):
        rates.add("ar", 20, 1.0, 0.9, answers)
    rates.add("draft", 40, 1.0, 0.9, answers)
    if answers == 1:
        assert rates.gain() == pytest.approx(1.5)
    else:
        assert 1.0 < rates.gain() < 1.3
