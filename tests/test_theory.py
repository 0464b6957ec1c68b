"""The paper's speedup formulas against hand-computed values, and our judge term."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lookahead_reasoning.runtime import theory


def test_token_level_hand_value():
    # (1 - 0.5^3) / ((1 - 0.5)(1 + 0.1 * 2)) = 0.875 / 0.6
    assert theory.token_level(2, 0.5, 0.1) == pytest.approx(0.875 / 0.6)


def test_token_level_is_bounded_by_one_over_one_minus_alpha():
    assert theory.token_level(200, 0.5, 1e-6) == pytest.approx(2.0, rel=1e-3)


def test_f_sync_hand_value():
    # (1 - 0.5^2) / ((1 - 0.5)(1 - 0.1 + 0.2)) = 0.75 / 0.55
    assert theory.f_sync(2, 0.5, 0.1) == pytest.approx(0.75 / 0.55)
    assert theory.f_sync(1, 0.7, 0.2) == pytest.approx(1.0)  # one step per round: no gain


def test_f_async_hand_values_both_branches():
    # k < ceil(1/c): 0.75 / (0.5 + 0.1 * (0.5 - 0.125 - 2 * 0.5 * 0.25))
    assert theory.f_async(2, 0.5, 0.1) == pytest.approx(0.75 / 0.5125)
    # k >= ceil(1/c) = 10: 1 / (0.1 + 0.9 * 0.5)
    assert theory.f_async(10, 0.5, 0.1) == pytest.approx(1 / 0.55)
    assert theory.f_async(4, 0.5, 0.25) == pytest.approx(1 / (0.25 + 0.75 * 0.5))


def test_judge_term_slows_both_engines_and_vanishes_at_zero():
    assert theory.f_sync(3, 0.6, 0.1, judge=0.2) == pytest.approx(theory.expected_steps(3, 0.6) / (1 - 0.1 + 0.3 + 0.2))
    assert theory.f_async(3, 0.6, 0.1, judge=0.0) == theory.f_async(3, 0.6, 0.1)
    assert theory.f_async(3, 0.6, 0.1, judge=0.3) < theory.f_async(3, 0.6, 0.1)
    assert theory.f_async(3, 0.0, 0.1, judge=0.25) == pytest.approx(1 / 1.25)  # nothing accepted: judge is pure cost


def test_engine_depth_mapping():
    assert theory.engine_speedup("sync", 2, 0.5, 0.1) == theory.f_sync(3, 0.5, 0.1)
    assert theory.engine_speedup("async", 2, 0.5, 0.1) == theory.f_async(3, 0.5, 0.1)  # chain: pipelined
    assert theory.engine_speedup("async", 2, 0.5, 0.1, width=2) == theory.f_async(2, 0.5, 0.1)  # tree windows
    # a chain round inside the window pipeline (an adaptive tree config that chose W = 1): windows too
    assert theory.engine_speedup("async", 2, 0.5, 0.1, window=True) == theory.f_async(2, 0.5, 0.1)
    assert theory.combined(1.5, 2.0) == 3.0


def test_steps_a_round_keeps_by_hand():
    assert theory.round_steps("sync", 1, 0.5) == pytest.approx(1.5)  # the draft step if accepted, then the target's
    assert theory.round_steps("sync", 3, 0.5) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert theory.round_steps("async", 2, 0.5, window=True) == pytest.approx(1.5)  # a window: no bonus step
    assert theory.round_steps("async", 1, 0.5) == pytest.approx(2.0)  # the chain pipeline runs on while accepted
    assert theory.round_steps("async", 1, 0.0) == pytest.approx(1.0)


def test_best_depth_picks_the_maximum_and_falls_back_to_ar():
    depth, speedup = theory.best_depth("sync", 0.8, 0.05)
    assert speedup == max(theory.engine_speedup("sync", d, 0.8, 0.05) for d in range(1, 9))
    assert theory.engine_speedup("sync", depth, 0.8, 0.05) == speedup
    assert theory.best_depth("sync", 0.05, 0.6, judge=0.5) == (0, 1.0)  # LR cannot pay: plain AR


@pytest.mark.parametrize("alpha, c, k", [(1.5, 0.1, 2), (0.5, 0.0, 2), (0.5, 0.1, 0)])
def test_bad_values_are_rejected(alpha, c, k):
    with pytest.raises(ValueError):
        theory.f_sync(k, alpha, c)


@given(st.floats(0.0, 0.99), st.floats(0.01, 1.0), st.integers(1, 12))
def test_async_formula_is_continuous_with_its_limit(alpha, c, k):
    value = theory.f_async(k, alpha, c)
    assert 0 < value <= 1 / c + 1e-9
    assert theory.f_sync(k, alpha, c) <= k + 1e-9


def test_branch_cost_enters_the_sync_round_by_hand():
    # γ = 2, k = 3, α = 0.5, c = 0.1, j = 0.2, B(3) = 2.9: (1 + .5 + .25) / (0.1·2 + 2.9 + 0.2)
    assert theory.f_sync(3, 0.5, 0.1, judge=0.2, branch=2.9) == pytest.approx(1.75 / 3.3)
    assert theory.f_sync(3, 0.5, 0.1, judge=0.2, branch=1.0) == theory.f_sync(3, 0.5, 0.1, judge=0.2)
    linear = lambda n: float(n)  # noqa: E731  a CPU: B(n) = n
    assert theory.engine_speedup("sync", 2, 0.5, 0.1, 0.2, branch_cost=linear) == pytest.approx(1.75 / 3.4)


def test_branch_cost_enters_the_async_stage_by_hand():
    # stage B + j = 2 + 0.5 = 2.5; S(k=3, α=.5, c=.1/2.5=.04) / 2.5, k < ⌈1/.04⌉:
    # (1 - .125) / (.5 + .04(.5 - .0625 - 3·.5·.125)) / 2.5
    inner = 0.875 / (0.5 + 0.04 * (0.5 - 0.0625 - 3 * 0.5 * 0.125))
    assert theory.f_async(3, 0.5, 0.1, judge=0.5, branch=2.0) == pytest.approx(inner / 2.5)
    assert theory.f_async(3, 0.5, 0.1, judge=0.3, branch=1.0) == theory.f_async(3, 0.5, 0.1, judge=0.3)


def test_trees_pay_for_each_distinct_prefix():
    assert theory.tree_branches(3, 1) == 4  # a chain: γ + 1
    assert theory.tree_branches(2, 2) == 1 + 2 + 4
    assert theory.tree_branches(3, 4, max_nodes=16) == 17
    seen = []
    theory.engine_speedup("sync", 2, 0.6, 0.1, width=2, branch_cost=lambda n: seen.append(n) or 1.0)
    assert seen == [7]


def test_linear_branch_cost_makes_ar_the_best_choice_and_free_branches_draft():
    linear = lambda n: float(n)  # noqa: E731
    assert theory.best_depth("sync", 1.0 - 1e-9, 0.38, judge=0.3, branch_cost=linear) == (0, 1.0)
    assert theory.best_depth("async", 0.9, 0.38, judge=0.3, branch_cost=linear) == (0, 1.0)
    assert theory.best_depth("sync", 0.7, 0.1, judge=0.1)[0] >= 2
