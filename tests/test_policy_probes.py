"""The probe schedule (runtime/adaptive/probes.py): fork probes, drafted probes, AR checks and their spacing."""

import pytest

from lookahead_reasoning.runtime.adaptive.depth import AdaptiveDepth, RoundPlan
from lookahead_reasoning.runtime.adaptive.tuning import (
    AR_STRETCH_STEPS, PROBE_BACKOFF, PROBE_BUDGET, PROBE_SHARE, PROBE_SPACING,
)
from lookahead_reasoning.runtime.adaptive.probes import check_spacing
from lookahead_reasoning.runtime.adaptive.theory import engine_speedup
from scripted_rounds import TOKENS, T, answers_in_threads, learn, round_record, shared_policy


def test_the_cold_start_times_the_target_alone_then_forks_a_probe_then_measures_the_draft():
    policy = AdaptiveDepth("sync", initial=3, max_depth=8)
    assert policy.next_round() == RoundPlan(0)  # first the target alone: the lone step
    policy.observe(round_record(0, 0, 0, branch_cost=float))
    plan = policy.next_round()  # then the same step once more in the fork: B(2)
    assert plan.depth == 0 and plan.probe_tokens == TOKENS
    probe = plan.probe_tokens
    free = lambda n: 1.0  # noqa: E731
    policy.observe(round_record(0, 0, 0, branch_cost=free, probe=probe))
    plans = [policy.next_round() for _ in range(3)]
    assert [p.depth for p in plans] == [1, 1, 1]  # branches may pay: one step measures c, j
    assert all(p.measuring for p in plans)  # ...and the target writes only its own step beside it
    assert policy.cost_estimate().expected_speedup is None


@pytest.mark.parametrize("fork_probe", [True, False])
def test_an_answers_first_round_is_never_a_probe(fork_probe):
    """An answer's first round is not timed (it prefills the prompt): a probe due there comes in the next round,
    after a lone step (requests that each are one AR stretch met every drafted probe at a first round)."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    branch_cost = float if fork_probe else (lambda n: 1.0 + 0.6 * (n - 1))  # drafted probes: branches could pay
    learn(policy, branch_cost, accept_all=False, rounds=60)
    assert policy.probes.is_fork(policy.estimates()) == fork_probe
    for _ in range(50):  # AR rounds until a probe is due
        plan = policy.next_round()
        if plan.probe_tokens or plan.depth:
            break
        policy.observe(round_record(0, 0, 0, branch_cost=branch_cost, stretch=plan.stretch_tokens))
    assert plan.probe_tokens or plan.depth
    policy.probes.ar_steps = policy.probes.spacing(policy.estimates())  # the probe is due again, and the next round is an answer's first
    assert policy.next_round(first=True) == RoundPlan(0)  # a lone step
    plans = [policy.next_round() for _ in range(2)]
    assert any(p.probe_tokens or p.depth for p in plans)  # then the probe (a fork probe after its lone step)


def test_one_answer_at_a_time_puts_a_due_probe_off_at_its_first_round():
    """Many answers starting while a probe is due: one writes a lone step and probes next; the first rounds of
    the others run on as AR stretches (all 64 of them wrote a lone step first)."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    learn(policy, float, rounds=60)  # a linear server: AR, with fork probes
    policy.answer_finished()
    for _ in range(3):
        policy.answer_started()
    policy.probes.ar_steps = policy.probes.spacing(policy.estimates())  # a probe is due
    with answers_in_threads(policy, 3) as ask:
        firsts = [ask(i, first=True) for i in range(3)]
        assert firsts[0] == RoundPlan(0) and all(p.stretch_tokens for p in firsts[1:])
        ask(0, finish=True)  # the answer that put it off ends after its lone step
        assert ask(1, first=True) == RoundPlan(0)  # so the next answer's first round may put it off
        assert ask(1).probe_tokens  # and probes next (a fork probe: the lone step before it is written)


def test_while_drafting_wins_ar_checks_keep_the_target_alone_measured_within_the_budget():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    free = lambda n: 1.0  # noqa: E731
    learn(policy, free)
    checks = 0
    for _ in range(300):
        plan = policy.next_round()
        checks += plan.depth == 0
        policy.observe(round_record(plan.depth, plan.depth, plan.depth, branch_cost=free, probe=plan.probe_tokens))
    speedup = policy.cost_estimate().expected_speedup
    spacing = check_spacing(speedup)
    assert checks == 300 // (spacing + 1)  # an AR round after every `spacing` drafting rounds
    # an AR round where drafting advances `speedup` times as fast loses 1 - 1/speedup of a round
    assert (1 - 1 / speedup) / spacing <= PROBE_BUDGET


def test_an_ar_check_due_at_an_answers_first_round_comes_in_its_next_round():
    """An answer's first round is not timed: an AR check there would measure nothing and cost a round, a large
    share of a short answer."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    learn(policy, lambda n: 1.0)
    policy.probes.drafting_rounds = check_spacing(policy.cost_estimate().expected_speedup)  # a check is due
    assert policy.next_round(first=True).depth > 0
    assert policy.next_round() == RoundPlan(0)


def test_drafting_at_one_depth_does_not_settle_on_a_wrong_slope():
    # every drafting round at one γ fits any split of its time between t₁ and the slope; without AR
    # rounds now and then, a policy that drafted on free branches would keep drafting on linear ones
    policy = AdaptiveDepth("sync", initial=2, max_depth=8, forget=0.8)
    learn(policy, lambda n: 1.0)
    learn(policy, float, rounds=60)
    estimate = policy.cost_estimate()
    assert estimate.planned_depth == 0 and estimate.branch_slope == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_probe_spacing_bounds_the_probe_cost(mode):
    """A drafted probe loses against AR on every step it writes: a sync γ = 1 round keeps 1 + α steps, an
    async chain round goes on while its drafts are accepted (1 / (1 − α) steps); the spacing, counted in AR
    steps, spreads all of that within the budget."""
    policy = AdaptiveDepth(mode, initial=2, max_depth=8)
    slopeish = lambda n: 1.0 + 0.6 * (n - 1)  # noqa: E731  branches could pay, but drafting loses at α = ½
    learn(policy, slopeish, accept_all=False, rounds=60)
    for _ in range(30):
        policy.observe(round_record(2, 1, 2, branch_cost=slopeish))
    assert not policy.probes.is_fork(policy.estimates())
    alpha = policy.acceptance.alpha_at(1)
    speedup = engine_speedup(mode, 1, alpha, policy.costs.c(), policy.costs.judge_cost(1),
                             branch_cost=policy.costs.branch_cost)
    gain = policy.rates.gain()
    speedup = speedup if gain is None else min(speedup, gain)
    steps = 1 + alpha if mode == "sync" else 1 / (1 - alpha)
    assert 0.3 < alpha < 0.55 and speedup < 0.95  # α̂'s long memory still holds some of the rejections above
    assert steps * (1 / speedup - 1) / policy.probes.spacing(policy.estimates()) <= PROBE_BUDGET + 1e-9
    policy.probes.backoff = PROBE_BACKOFF  # as after fork probes that kept finding AR
    assert policy.probes.spacing(policy.estimates()) == policy.probes.budget_spacing(policy.estimates(), fork=False)  # drafted probes keep the budget's spacing: α̂ needs them


def test_a_fork_probe_is_priced_with_the_fixed_cost_of_its_two_requests():
    """On a CPU-like server (B(n) = n) whose requests cost a fixed o = 0.3 of a step besides their tokens, a
    fork probe loses its quarter step's second branch and two requests' fixed cost (the lone step before
    it and its fork, where a stretch would have written both): the spacing keeps that within the budget
    (priced by the branch alone, the probes would overrun the budget where o is large, as on a CPU)."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    o, per_token = 0.3, T  # a step of TOKENS tokens: o + TOKENS·T = 1.3 s
    for tokens in (12, 20, 28, 20, 16, 24):  # lengths that vary, so the fixed cost is told from t₁
        policy.costs.observe_target(1, o + tokens * per_token, tokens)
    policy.costs.observe_target(1, o + 20 * per_token * 1.25, 20, others=0.25)  # a probe's quarter beside it
    share = policy.costs.request_share()
    assert share == pytest.approx(o / (o + policy.costs.estimate().step_tokens * per_token), rel=0.05)
    loss = (policy.costs.branch_cost(2) - 1) * PROBE_SHARE + 2 * share
    assert loss / policy.probes.spacing(policy.estimates()) <= PROBE_BUDGET
    assert (policy.costs.branch_cost(2) - 1) * PROBE_SHARE / PROBE_BUDGET < policy.probes.spacing(policy.estimates()) - 1


def test_probes_that_keep_finding_ar_are_spaced_further_and_drafting_resets_the_spacing():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    linear = float  # B(n) = n: AR wins, and every fork probe says so again
    gaps, steps = [], 0  # AR steps before each fork probe, from the cold start on
    for _ in range(3000):
        plan = policy.next_round()
        assert plan.depth == 0
        policy.observe(round_record(0, 0, 0, branch_cost=linear, probe=plan.probe_tokens, stretch=plan.stretch_tokens))
        steps += plan.stretch_tokens // TOKENS or 1
        if plan.probe_tokens:
            gaps.append(steps)
            steps = 0
    base = policy.probes.budget_spacing(policy.estimates(), fork=True)
    late = AR_STRETCH_STEPS + 2  # a probe comes at most a stretch (and the lone step before it) late
    # the cold start's probe, then one at the budget's spacing; each probe that left the plan at AR doubles
    # the spacing, up to PROBE_BACKOFF times the budget's
    assert base <= gaps[1] <= base + late
    assert all(later >= 1.5 * earlier for earlier, later in zip(gaps[1:3], gaps[2:4]))
    assert max(gaps) <= PROBE_BACKOFF * base + late and gaps[-1] >= min(PROBE_BACKOFF * base, PROBE_SPACING[1])
    learn(policy, lambda n: 1.0, rounds=200)  # the branches turned free: a probe sees it, and the plan drafts
    assert policy.cost_estimate().planned_depth >= 3
    assert policy.probes.backoff == 1  # a plan that drafts resets the fork probes' spacing
    assert policy.probes.spacing(policy.estimates()) == policy.probes.budget_spacing(policy.estimates(), fork=False)  # the budget's


def test_probes_owed_by_answers_that_ended_their_stretches_together_are_not_lost():
    """16 answers end stretches at about one time and one takes the probe: the count keeps what it held beyond
    the probe's spacing, up to one probe owed by each other answer. An answer alone starts the count again."""
    policy = shared_policy(16)
    spacing = policy.probes.spacing(policy.estimates())
    policy.probes.ar_steps = 3 * spacing
    policy.probes.probe_taken(policy.estimates(), fork=False, spacing=spacing)
    assert policy.probes.ar_steps == 2 * spacing
    policy.probes.ar_steps = 100 * spacing
    policy.probes.probe_taken(policy.estimates(), fork=False, spacing=spacing)
    assert policy.probes.ar_steps == 15 * spacing
    alone = shared_policy(1)
    alone.probes.ar_steps = 3 * alone.probes.spacing(alone.estimates())
    alone.probes.probe_taken(alone.estimates(), fork=False, spacing=alone.probes.spacing(alone.estimates()))
    assert alone.probes.ar_steps == 0


def test_the_round_that_measures_the_draft_forks_no_branch_after_it():
    """The cold start's round that prices the draft and the verifier writes the target's own step alone: on a
    linear server the branch after the draft would cost a whole step and keep one only if it is accepted."""
    from scripted import DELIM, ScriptedJudge, ScriptedModels

    from lookahead_reasoning.runtime.config import LookaheadConfig
    from lookahead_reasoning.runtime.engine import SyncEngine
    from lookahead_reasoning.verifiers import FastPathVerifier

    target = [f"step {i} of the target" for i in range(6)]
    draft = ["step 0 of the target", "a wrong step", *target[2:]]
    models = ScriptedModels(target, draft)
    widths = []
    original = models.target

    def target_call(prefix, continuations, caps=None, commit_prefix=True):
        widths.append(len(continuations))
        return original(prefix, continuations, caps, commit_prefix)

    models.target = target_call
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    for tokens in (12, 20, 28):  # the target alone, and a fork probe that found branches nearly free
        policy.costs.observe_target(1, tokens * T, tokens)
    policy.costs.observe_target(1, 20 * T * 1.025, 20, others=0.25)
    assert policy.costs.slope_known and policy.costs.c() is None
    config = LookaheadConfig(adaptive_depth=True, max_step_tokens=50)
    result = SyncEngine(config, models, FastPathVerifier(ScriptedJudge()), policy=policy).answer("q")
    measuring = [r for r in result.round_log if r.kind == "measuring"]
    assert len(measuring) == 1 and measuring[0].depth == 1 and measuring[0].branches == 1
    assert widths[measuring[0].index] == 1  # one target request: the step after the prefix, not after the draft
    assert measuring[0].accepted == 1 and [s.source for s in measuring[0].kept] == ["draft"]
    assert result.text == DELIM.join(target) and policy.costs.c() is not None
