"""α̂ per width (runtime/adaptive/alpha.py): a long memory that restarts on a change, shared by concurrent answers."""

import random
import statistics

import pytest

from lookahead_reasoning.runtime.adaptive.depth import AcceptanceTally, AdaptiveDepth
from scripted_rounds import round_record


def _tally_after(rounds, forget=0.9, slow_forget=0.99):
    """An AcceptanceTally after `rounds`, each (accepted, rejected) positions, and the estimate after each."""
    tally, estimates = AcceptanceTally(), []
    for accepted, rejected in rounds:
        tally.add(accepted, rejected, forget, slow_forget)
        estimates.append(tally.estimate())
    return estimates


def _chain_rounds(rng, alpha, count, depth=4):
    """Sync chain rounds of γ = `depth` at per-position acceptance `alpha`: (accepted, rejected) positions."""
    rounds = []
    for _ in range(count):
        accepted = 0
        while accepted < depth and rng.random() < alpha:
            accepted += 1
        rounds.append((accepted, int(accepted < depth)))
    return rounds


def test_alpha_rests_on_a_long_memory_while_acceptance_holds():
    """One answer at α = 0.7: a memory forgetting 0.9 a round reads α̂ from about 25 positions, and its estimates
    stray by about ±0.09; the long memory's by under half of that."""
    rng = random.Random(7)
    rounds = _chain_rounds(rng, 0.7, 600)
    long = _tally_after(rounds)[100:]
    short = _tally_after(rounds, slow_forget=0.9)[100:]  # the short memory alone
    assert statistics.pstdev(long) < 0.5 * statistics.pstdev(short)
    assert abs(statistics.mean(long) - 0.7) < 0.03
    # the policy's α̂ is that long memory (its own forgetting, 0.9 a round, is the short one)
    policy, estimates = AdaptiveDepth("sync", initial=2, max_depth=8), []
    for accepted, rejected in rounds:
        policy.observe(round_record(4, accepted, accepted + rejected, branch_cost=lambda n: 1.0))
        estimates.append(policy.acceptance.alpha)
    assert estimates[100:] == pytest.approx(long)


def test_alpha_follows_a_change_of_acceptance_within_a_few_rounds():
    """α drops from 0.9 to 0.2: the long memory restarts from the short one, and follows the drop within a
    few rounds of where the short memory alone would (without the restart it would still read 0.8)."""
    rng = random.Random(3)
    rounds = _chain_rounds(rng, 0.9, 200) + _chain_rounds(rng, 0.2, 30)
    estimates, short = _tally_after(rounds), _tally_after(rounds, slow_forget=0.9)
    assert estimates[199] > 0.85
    below = lambda series: next(i for i, e in enumerate(series) if i >= 200 and e < 0.6)  # noqa: E731
    assert below(estimates) <= below(short) + 3
    assert estimates[-1] < 0.5 and _tally_after(rounds, slow_forget=0.99, forget=0.99)[-1] > 0.75


def test_a_burst_of_every_answers_last_round_does_not_swamp_the_shared_alpha():
    """16 answers at α = 0.5, then every answer's last round, all accepted up to the end (no rejection to
    see): α̂ moves by about one round of each answer; forgetting per round of any answer forgot the rest."""
    def policy_after_burst(answers: int) -> float:
        policy = AdaptiveDepth("sync", initial=2, max_depth=8)
        for _ in range(answers):
            policy.answer_started()
        for _ in range(10 * 16):
            policy.observe(round_record(2, 1, 2, branch_cost=lambda n: 1.0))  # half the positions accepted
        for _ in range(16):
            policy.observe(round_record(4, 4, 4, branch_cost=lambda n: 1.0))
        return policy.acceptance.alpha

    assert policy_after_burst(1) > 0.9
    assert 0.5 < policy_after_burst(16) < 0.65


def test_a_width_never_run_gets_its_alpha_as_if_candidates_were_independent():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8, width=4)
    policy.observe(round_record(2, 1, 2, branch_cost=float))  # chains: α₁ ≈ 0.5
    policy.observe(round_record(2, 1, 2, branch_cost=float))
    alpha_1 = policy.acceptance.alpha_at(1)
    assert policy.acceptance.alpha_at(2) == pytest.approx(1 - (1 - alpha_1) ** 2)
    assert policy.acceptance.alpha_at(4) == pytest.approx(1 - (1 - alpha_1) ** 4)
