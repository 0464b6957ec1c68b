"""The paper's speedup formulas against hand-computed values, and our judge term."""

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lookahead_reasoning.eval import finite_theory
from lookahead_reasoning.runtime.adaptive import theory


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
    assert theory.engine_speedup("async", 2, 0.5, 0.1, width=2) == theory.f_windows(2, 0.5, 0.1, width=2)  # trees
    # a chain round inside the window pipeline (an adaptive tree config that chose W = 1): windows too
    assert theory.engine_speedup("async", 2, 0.5, 0.1, window=True) == theory.f_windows(2, 0.5, 0.1)


def test_window_pipelining_hand_values():
    # γ = 2, α = .5, c = .1: 1.5 steps a round; a chain's window is reused after two accepted (.25): max(1, .2),
    # else drafted first: .2 + 1
    assert theory.f_windows(2, 0.5, 0.1) == pytest.approx(1.5 / (0.25 * 1.0 + 0.75 * 1.2))
    # W = 2 at the same per-position α: each candidate is accepted with 1 − √.5, the first at both levels less often
    first = 1 - 0.5**0.5
    assert theory.first_candidate_alpha(0.5, 2) == pytest.approx(first)
    assert theory.f_windows(2, 0.5, 0.1, width=2) == pytest.approx(1.5 / (first**2 * 1.0 + (1 - first**2) * 1.2))
    # drafting longer than the verification stage shows even when reused: max(s, γc); j and B add to s
    assert theory.f_windows(4, 0.5, 0.4, judge=0.2, branch=1.5) == pytest.approx(
        theory.expected_steps(4, 0.5) / (0.0625 * 1.7 + 0.9375 * 3.3))
    assert theory.f_windows(3, 1.0, 0.1) == pytest.approx(3.0)  # all accepted: γ steps a stage


def test_steps_a_round_keeps_by_hand():
    assert theory.round_steps("sync", 1, 0.5) == pytest.approx(1.5)  # the draft step if accepted, then the target's
    assert theory.round_steps("sync", 3, 0.5) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert theory.round_steps("async", 2, 0.5, window=True) == pytest.approx(1.5)  # a window: no bonus step
    assert theory.round_steps("async", 1, 0.5) == pytest.approx(2.0)  # the chain pipeline runs on while accepted
    assert theory.round_steps("async", 1, 0.0) == pytest.approx(1.0)


def _best(engine, alpha, c, judge=0.0, branch_cost=theory.free_branches):
    """theory.best_depth over the engine's speedup, γ up to 8."""
    return theory.best_depth(lambda depth: theory.engine_speedup(engine, depth, alpha, c, judge,
                                                                 branch_cost=branch_cost), 8)


def test_best_depth_picks_the_maximum_and_falls_back_to_ar():
    depth, speedup = _best("sync", 0.8, 0.05)
    assert speedup == max(theory.engine_speedup("sync", d, 0.8, 0.05) for d in range(1, 9))
    assert theory.engine_speedup("sync", depth, 0.8, 0.05) == speedup
    assert _best("sync", 0.05, 0.6, judge=0.5) == (0, 1.0)  # LR cannot pay: plain AR


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
    assert _best("sync", 1.0 - 1e-9, 0.38, judge=0.3, branch_cost=linear) == (0, 1.0)
    assert _best("async", 0.9, 0.38, judge=0.3, branch_cost=linear) == (0, 1.0)
    assert _best("sync", 0.7, 0.1, judge=0.1)[0] >= 2


# --- a problem of N steps: finite_speedup ----------------------------------------------------------------


def _replayed_time(engine, depth, verdicts, c, j, branch=lambda b: 1.0, window=False):
    """The engine's round rule replayed on one pattern of per-position verdicts, in target steps; a check of
    the theory's rounds that shares none of its code. For windows a verdict is "first" (accepted with the
    first candidate), "other" (accepted with another) or False; elsewhere True or False."""
    n = len(verdicts)
    stage = 1.0 + j
    if engine == "async" and window:
        kept, spent, reused = 0, 0.0, False
        while kept < n:
            m = min(depth, n - kept)
            spent += max(stage, c * m) if reused else c * m + stage
            round_verdicts = list(verdicts[kept:kept + m])
            accepted = round_verdicts.index(False) if False in round_verdicts else m
            reused = round_verdicts == ["first"] * m
            kept += accepted + 1 if accepted < m else m
        return spent
    k = depth + 1
    unlimited = engine == "async" and k >= math.ceil(stage / c - 1e-12)
    kept, spent = 0, 0.0
    while kept < n:
        left = n - kept
        if engine == "sync":
            m = min(depth, left)
            spent += c * m + branch(m if m == left else m + 1) + j  # no branch after a draft that ends on EOS
        else:
            m = left if unlimited else min(k, left)
        window_verdicts = list(verdicts[kept:kept + m])
        accepted = window_verdicts.index(False) if False in window_verdicts else m
        if engine == "async":  # verdicts at s, s + c, …; a full round of k with more to come costs s
            spent += stage + c * accepted if accepted < m else stage + c * (m - 1) if m == left else stage
        if accepted < m:
            kept += accepted + 1  # the accepted drafts, then the target's step
        else:
            kept += m if m == left else m + (engine == "sync")  # the bonus step, except at EOS
    return spent


def _enumerated_speedup(engine, depth, alpha, c, j, n, branch=lambda b: 1.0, window=False, width=1):
    """finite_speedup by brute force: every pattern of per-position verdicts (each accepted with α; for
    windows with the first of W independent candidates with α₁, 1 − (1 − α₁)^W = α)."""
    if engine == "async" and window:
        first = 1 - (1 - alpha) ** (1 / width)
        outcomes = {"first": first, "other": alpha - first, False: 1 - alpha}
    else:
        outcomes = {True: alpha, False: 1 - alpha}
    expected = 0.0
    for verdicts in itertools.product(outcomes, repeat=n):
        prob = math.prod(outcomes[v] for v in verdicts)
        expected += prob * _replayed_time(engine, depth, verdicts, c, j, branch, window)
    return n / expected


def test_finite_sync_hand_values():
    # N = 1, γ = 1: one round, the draft ends on EOS, only the target's step after the prefix: 1 + c + j
    assert finite_theory.finite_speedup("sync", 1, 0.5, 0.1, 0.2, steps=1) == pytest.approx(1 / 1.3)
    # N = 2, γ = 1: 1.3 for the first round, and another 1.3 when the draft was rejected (1 − α)
    assert finite_theory.finite_speedup("sync", 1, 0.5, 0.1, 0.2, steps=2) == pytest.approx(2 / (1.3 + 0.5 * 1.3))
    # the same with B(2) = 1.5: the first round forks 2 branches, the last one 1 (nothing after EOS)
    cost = {1: 1.0, 2: 1.5}.__getitem__
    assert finite_theory.finite_speedup("sync", 1, 0.5, 0.1, 0.2, branch_cost=cost, steps=2) == pytest.approx(
        2 / (1.8 + 0.5 * 1.3))
    # N = 2, γ = 4: one round drafts both steps (the second on EOS): 0.2 + 1 + 0.2, then 1.3 when d_1 is rejected
    assert finite_theory.finite_speedup("sync", 4, 0.5, 0.1, 0.2, steps=2) == pytest.approx(2 / (1.4 + 0.5 * 1.3))


def test_finite_async_hand_values():
    # s = 1 + j = 1.2. N = 1: the draft hides behind the target's step, one verdict after s
    assert finite_theory.finite_speedup("async", 1, 0.5, 0.1, 0.2, steps=1) == pytest.approx(1 / 1.2)
    # N = 2, chain γ = 1 (k = 2): d_1 rejected: s, then N = 1 again (s); accepted: the second verdict at s + c
    assert finite_theory.finite_speedup("async", 1, 0.5, 0.1, 0.2, steps=2) == pytest.approx(2 / (0.5 * 2.4 + 0.5 * 1.3))
    # N = 3: rejected at once: s + T(2) = 3.05; one accepted then rejected: s + c + T(1) = 2.5;
    # both accepted (a full round of k = 2, no EOS): s + T(1) = 2.4
    assert finite_theory.finite_speedup("async", 1, 0.5, 0.1, 0.2, steps=3) == pytest.approx(
        3 / (0.5 * 3.05 + 0.25 * 2.5 + 0.25 * 2.4))
    # windows of γ = 1 keep one step a round; the first is drafted first (c + s = 1.3), the second too after a
    # rejection or an acceptance of the second candidate, else reused (s = 1.2); the first candidate: 1 − √.5
    first = 1 - 0.5**0.5
    assert finite_theory.finite_speedup("async", 1, 0.5, 0.1, 0.2, width=2, steps=2) == pytest.approx(
        2 / (1.3 + first * 1.2 + (1 - first) * 1.3))
    # k = 3 >= ⌈s/c⌉ = 2: no depth limit, rounds run on to a rejection. N = 3 (α = .5, c = .5, s = 1):
    # .5(1 + T(2)) + .25(1.5 + T(1)) + .125·2 + .125·2 with T(1) = 1, T(2) = 1.75
    assert finite_theory.finite_speedup("async", 2, 0.5, 0.5, steps=2) == pytest.approx(2 / 1.75)
    assert finite_theory.finite_speedup("async", 2, 0.5, 0.5, steps=3) == pytest.approx(3 / 2.5)


@pytest.mark.parametrize("engine, depth, alpha, c, j, window", [
    ("sync", 1, 0.6, 0.1, 0.06, False), ("sync", 2, 0.8, 0.1, 0.06, False), ("sync", 4, 0.7, 0.25, 0.2, False),
    ("async", 1, 0.6, 0.1, 0.06, False), ("async", 4, 0.8, 0.1, 0.06, False), ("async", 3, 0.7, 0.1, 0.06, True),
    ("async", 3, 0.6, 0.4, 0.1, False),  # k = 4 >= ⌈s/c⌉ = 3: the unlimited branch
])
def test_finite_speedup_matches_brute_force(engine, depth, alpha, c, j, window):
    cost = (lambda b: 1.0) if engine == "async" else (lambda b: 1.0 + 0.1 * (b - 1))
    for n in (1, 2, 3, 5, 9):
        assert finite_theory.finite_speedup(engine, depth, alpha, c, j, branch_cost=cost, window=window, steps=n) == \
            pytest.approx(_enumerated_speedup(engine, depth, alpha, c, j, n, cost, window)), n


@pytest.mark.parametrize("depth, alpha, c, width", [(1, 0.6, 0.1, 2), (3, 0.84, 0.1, 2), (2, 0.7, 0.5, 3), (4, 0.9, 0.05, 2)])
def test_finite_windows_match_brute_force(depth, alpha, c, width):
    for n in (1, 2, 3, 6):
        assert finite_theory.finite_speedup("async", depth, alpha, c, 0.06, width, steps=n) == pytest.approx(
            _enumerated_speedup("async", depth, alpha, c, 0.06, n, window=True, width=width)), n


@pytest.mark.parametrize("engine", ["sync", "async"])
@pytest.mark.parametrize("depth, alpha, c, j, width", [
    (1, 0.6, 0.1, 0.06, 1), (4, 0.8, 0.1, 0.06, 1), (2, 0.5, 0.05, 0.0, 1), (3, 0.9, 0.3, 0.2, 1),
    (12, 0.7, 0.1, 0.06, 1), (3, 0.84, 0.1, 0.06, 2),
])
def test_finite_speedup_converges_to_the_endless_formula(engine, depth, alpha, c, j, width):
    endless = theory.engine_speedup(engine, depth, alpha, c, j, width)
    assert finite_theory.finite_speedup(engine, depth, alpha, c, j, width, steps=2000) == pytest.approx(endless, rel=0.01)
    if depth < 12:  # the end of a problem costs; at γ ≥ N the short drafts of the last rounds can save more
        assert finite_theory.finite_speedup(engine, depth, alpha, c, j, width, steps=12) < endless


def test_pattern_time_hand_values():
    # sync γ = 1, c = .1, j = .2: a round costs 1.3 (the last, drafting the EOS step, forks one branch: 1.3 too)
    assert finite_theory.pattern_time("sync", 1, [True, True], 0.1, 0.2) == pytest.approx(1.3)  # d_1 and the bonus step
    assert finite_theory.pattern_time("sync", 1, [False, True], 0.1, 0.2) == pytest.approx(2.6)  # t_1, then d_2 at EOS
    # γ = 4 on 3 steps: one round drafts all three (the last on EOS), 3 branches: .3 + B(3) + .2
    assert finite_theory.pattern_time("sync", 4, [True] * 3, 0.1, 0.2, branch_cost=float) == pytest.approx(3.5)
    # async chain γ = 1 (k = 2), s = 1.2: accepted then rejected: s + c, keeping 2; then the last step: s
    assert finite_theory.pattern_time("async", 1, [True, False, True], 0.1, 0.2) == pytest.approx(1.3 + 1.2)


@given(st.sampled_from(["sync", "async"]), st.integers(1, 5), st.lists(st.booleans(), min_size=1, max_size=14),
       st.sampled_from([0.05, 0.1, 0.4]), st.sampled_from([0.0, 0.06, 0.3]))
def test_pattern_time_replays_the_rounds(engine, depth, verdicts, c, j):
    cost = (lambda b: 1.0) if engine == "async" else (lambda b: 1.0 + 0.1 * (b - 1))
    assert finite_theory.pattern_time(engine, depth, verdicts, c, j, branch_cost=cost) == pytest.approx(
        _replayed_time(engine, depth, verdicts, c, j, cost))


@given(st.integers(1, 5), st.lists(st.sampled_from(["first", "other", False]), min_size=1, max_size=14),
       st.sampled_from([0.05, 0.1, 0.4]), st.sampled_from([0.0, 0.06, 0.3]))
def test_pattern_time_replays_windows(depth, drawn, c, j):
    verdicts = [v != False for v in drawn]  # noqa: E712 (the strings are accepted positions)
    first = [v == "first" for v in drawn]
    assert finite_theory.pattern_time("async", depth, verdicts, c, j, width=2, first_candidate=first) == pytest.approx(
        _replayed_time("async", depth, drawn, c, j, window=True))


@pytest.mark.parametrize("engine, depth, window", [("sync", 2, False), ("async", 1, False), ("async", 3, True)])
def test_pattern_time_averages_to_the_n_step_theory(engine, depth, window):
    alpha, n = 0.7, 6
    expected = sum(
        math.prod(alpha if v else 1 - alpha for v in verdicts) * finite_theory.pattern_time(engine, depth, verdicts, 0.1, 0.06,
                                                                                    window=window)
        for verdicts in itertools.product((True, False), repeat=n))
    assert n / expected == pytest.approx(finite_theory.finite_speedup(engine, depth, alpha, 0.1, 0.06, window=window, steps=n))


def test_bench_reads_the_drawn_verdicts_from_the_round_log():
    from types import SimpleNamespace as Record

    from lookahead_reasoning.eval.bench import _pattern_theory, drawn_verdicts

    rounds = [Record(accepted=2, positions=2, kept=[0] * 3, first_candidates=2),  # both accepted, the bonus step
              Record(accepted=1, positions=2, kept=[0] * 2, first_candidates=1),  # one accepted, the next rejected
              Record(accepted=0, positions=1, kept=[0], first_candidates=0)]  # the last draft rejected
    run = Record(round_log=rounds)
    verdicts, first = drawn_verdicts(run)
    assert verdicts == [True, True, None, True, False, False]
    assert _pattern_theory("sync", 2, 0.1, 0.06, 1, [run, run]) == pytest.approx(
        12 / (2 * finite_theory.pattern_time("sync", 2, verdicts, 0.1, 0.06)))
    assert _pattern_theory("sync", 4, 0.1, 0.06, 1, [run]) is None  # γ = 4 would judge the bonus step: not these rounds
    # a tree's window rounds: the second accepted its only position with another candidate than the first
    windows = Record(round_log=[Record(accepted=2, positions=2, kept=[0] * 2, first_candidates=2),
                                Record(accepted=2, positions=2, kept=[0] * 2, first_candidates=1),
                                Record(accepted=1, positions=2, kept=[0] * 2, first_candidates=1)])
    verdicts, first = drawn_verdicts(windows)
    assert verdicts == [True, True, True, True, True, False] and first == [True, True, True, False, True, False]
    # the first window drafted first (.2 + 1.06), the second reused (1.06), the third drafted first again
    assert _pattern_theory("async", 2, 0.1, 0.06, 2, [windows]) == pytest.approx(6 / (1.26 + 1.06 + 1.26))


def test_finite_speedup_rejects_bad_values():
    with pytest.raises(ValueError):
        finite_theory.pattern_time("sync", 2, [], 0.1)
    with pytest.raises(ValueError, match="step 1"):
        finite_theory.pattern_time("sync", 2, [True, None, True], 0.1)
    with pytest.raises(ValueError):
        finite_theory.finite_speedup("sync", 2, 0.5, 0.1, steps=0)
    with pytest.raises(ValueError):
        finite_theory.finite_speedup("batch", 2, 0.5, 0.1, steps=4)
    with pytest.raises(ValueError):
        finite_theory.finite_speedup("async", 2, 1.5, 0.1, steps=4)


def test_bench_points_carry_the_n_step_theory():
    from lookahead_reasoning.eval.bench import BenchPoint, _theory
    from lookahead_reasoning.eval.bench_report import bench_table
    from lookahead_reasoning.runtime.adaptive.depth import depth_limit

    j = 0.06
    assert _theory("sync", 2, 0.7, 0.1, j, 1, 0.7, steps=12) == finite_theory.finite_speedup("sync", 2, 0.7, 0.1, j, steps=12)
    assert _theory("sync", 2, 0.7, 0.1, j, 1, 0.7) == theory.engine_speedup("sync", 2, 0.7, 0.1, j)  # unchanged
    # adaptive: the best fixed γ for 12-step problems, which need not be the endless formula's best
    best = max(finite_theory.finite_speedup("async", d, 0.7, 0.1, j, steps=12) for d in range(1, 9))
    assert _theory("async", "adaptive", 0.7, 0.1, j, 1, 0.7, steps=12) == best
    assert _theory("async", "adaptive", 0.7, 0.1, j, 1, 0.7) == _best("async", 0.7, 0.1, j)[1]
    assert _theory("sync", "adaptive", 0.05, 0.6, 0.5, 1, 0.05, steps=12) == 1.0  # AR when nothing pays
    # trees: the best over widths and γ, each width at the α of its W candidates, windows for async
    tree = _theory("async", "adaptive", 0.84, 0.1, j, 2, 0.6, steps=12)
    assert tree == pytest.approx(max(
        finite_theory.finite_speedup("async", d, 1 - 0.4**w, 0.1, j, w, window=True, steps=12)
        for w in (1, 2) for d in range(1, depth_limit(8, w) + 1)))
    assert tree < _theory("async", "adaptive", 0.84, 0.1, j, 2, 0.6)
    point = BenchPoint(alpha=0.6, c=0.1, depth=2, width=1, engine="sync", measured_speedup=1.2, theory_speedup=1.6,
                       ratio=0.75, finite_theory_speedup=1.5, finite_ratio=0.8, pattern_theory_speedup=1.25,
                       pattern_ratio=0.96, overhead_ms_per_round=5.0,
                       prefix_hit_ratio=None, realized_alpha=0.6, ar_s=1.0, method_s=1.0, rounds=4)
    header, _, row = bench_table([point]).splitlines()[:3]
    cells = dict(zip([h.strip() for h in header.split("|")], [r.strip() for r in row.split("|")]))
    assert cells["N-step theory"] == "1.50" and cells["N-step ratio"] == "0.80" and cells["ratio"] == "0.75"
    assert cells["drawn theory"] == "1.25" and cells["drawn ratio"] == "0.96"
