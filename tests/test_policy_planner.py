"""The planner (runtime/adaptive/planner.py): which γ and W the costs and α̂ call for, AR included."""

import pytest

from lookahead_reasoning.runtime.adaptive.depth import AdaptiveDepth
from lookahead_reasoning.runtime.adaptive.tuning import AR_STRETCH_STEPS, PROBE_BUDGET, PROBE_SHARE
from lookahead_reasoning.runtime.adaptive.stretches import stretch
from scripted_rounds import TOKENS, T, fitted_costs, learn, round_record


def test_policy_runs_ar_when_branches_cost_linear_time_even_at_full_acceptance():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    linear = float  # B(n) = n: a CPU, or a busy GPU
    assert learn(policy, linear, rounds=200) == 0  # it never drafts: even free, perfect drafts could not pay
    assert policy.costs.branch_cost(3) == pytest.approx(3.0)
    assert policy.cost_estimate().planned_depth == 0
    probes = steps = 0
    for _ in range(300):
        plan = policy.next_round()
        assert plan.depth == 0
        policy.observe(round_record(0, 0, 0, branch_cost=linear, probe=plan.probe_tokens, stretch=plan.stretch_tokens))
        probes += bool(plan.probe_tokens)  # the probes fork the target alone: cheap, and they watch the load
        steps += plan.stretch_tokens // TOKENS or 1  # between probes, AR rounds write several steps at once
    spacing = policy.probes.spacing(policy.estimates())
    assert probes >= 1 and spacing >= 6 and probes <= steps // spacing + 1
    # what the probes cost stays in budget: a quarter step's second branch every `spacing` rounds
    assert (policy.costs.branch_cost(2) - 1) * PROBE_SHARE / spacing <= PROBE_BUDGET


@pytest.mark.parametrize("slope, drafts", [(0.9, False), (0.5, True)])
def test_branches_nearly_linear_rule_drafting_out_before_a_measuring_draft(slope, drafts):
    """At s = 0.9 free, always accepted drafts would still gain 9/(1 + 8·0.9) = 1.10× at γ = 8, but no
    real draft would: the policy does not spend a drafted round to measure c and j. At s = 0.5 it does."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    assert (learn(policy, lambda n: 1.0 + slope * (n - 1), rounds=40) > 0) is drafts
    assert policy.costs.estimate().branch_slope == pytest.approx(slope, rel=0.02)


def test_policy_drafts_deep_when_branches_are_free():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    free = lambda n: 1.0  # noqa: E731  an idle GPU
    learn(policy, free)
    assert policy.next_round().depth >= 4
    estimate = policy.cost_estimate()
    assert estimate.expected_speedup > 2 and estimate.branch_slope == pytest.approx(0.0)


def test_drafting_is_priced_against_ar_as_it_runs_in_stretches_that_pay_the_fixed_cost_once():
    """The theory prices an AR step at S = o + L̄·t₁; AR rounds here write stretches of k steps that pay o once.
    Free branches, c = 0.2, no verifier cost, α = ½: a γ = 1 round beats AR at S by 1.5 / 1.2 = 1.25×. Where
    o is as long as the step's tokens (a client short of CPU), AR runs at (o/k + L̄·t₁)/S, about half of S,
    and drafting loses: AR."""
    def policy_with(overhead):
        costs = fitted_costs(overhead)
        step = overhead + costs.estimate().step_tokens * T
        costs.observe_draft(0.2 * step, 1)  # c = 0.2
        policy = AdaptiveDepth("sync", initial=2, max_depth=1, costs=costs)
        policy.acceptance.add(1, 50.0, 50.0, 1.0, 1.0)  # α̂ = ½
        return policy, policy.cost_estimate()

    policy, estimate = policy_with(0.0)
    assert estimate.planned_depth == 1 and estimate.expected_speedup == pytest.approx(1.25, rel=0.01)
    policy, estimate = policy_with(37.5 * T)  # the mean step's tokens take as long
    steps = stretch(policy.costs)[0]
    share = estimate.request_overhead_s / (estimate.request_overhead_s + estimate.step_tokens * T)
    assert share == pytest.approx(0.5, rel=0.05) and steps > AR_STRETCH_STEPS
    assert estimate.planned_depth == 0  # drafting would advance at 1.25 × (1 − share · (1 − 1/k)) of AR
    assert policy.planner.best(policy.estimates(), 1, 0.5, 0.2, 0.0)[1] == 1.0


def _learn_widths(policy, branch_cost, acceptance, rounds=60):
    """Rounds at the widths the policy picks; `acceptance[w]` = (accepted, decided) positions per round."""
    widths = []
    for _ in range(rounds):
        plan = policy.next_round()
        accepted, positions = acceptance[plan.width] if plan.depth else (0, 0)
        policy.observe(round_record(plan.depth, accepted, positions, branch_cost=branch_cost, width=plan.width,
                                    probe=plan.probe_tokens, stretch=plan.stretch_tokens))
        widths.append(plan.width if plan.depth else 0)
    return widths


def test_policy_picks_trees_where_they_pay_and_chains_where_they_do_not():
    acceptance = {1: (1, 2), 2: (3, 4)}  # α 0.5 for a chain, 0.75 per position for a tree of two candidates
    free = lambda n: 1.0  # noqa: E731
    policy = AdaptiveDepth("sync", initial=2, max_depth=8, width=2)
    widths = _learn_widths(policy, free, acceptance)
    assert widths[widths.index(1)] == 1 and 2 in widths  # the first drafts are chains: their α is measured
    estimate = policy.cost_estimate()
    assert estimate.planned_width == 2 and estimate.width_speedups[2] > estimate.width_speedups[1]

    dear = lambda n: 1.0 + 0.3 * (n - 1)  # noqa: E731  every branch costs: a tree's many branches do not pay
    policy = AdaptiveDepth("sync", initial=2, max_depth=8, width=2)
    widths = _learn_widths(policy, dear, acceptance)
    estimate = policy.cost_estimate()
    assert estimate.planned_width == 1 and estimate.planned_depth >= 1
    assert estimate.width_speedups[2] < estimate.width_speedups[1]
    from lookahead_reasoning.cli.display import describe_costs

    assert describe_costs(estimate).endswith(f"(W = 2 would give {estimate.width_speedups[2]:.2f}×: staying at W = 1)")


def test_the_plan_leans_toward_drafting_while_few_positions_are_judged():
    """Free branches, c = j = ¼. One draft accepted of three (α̂ 0.38): α̂ plans AR, one standard error up
    it drafts, so the plan drafts one step, which judges more positions; the same α̂ over 200 positions is
    known well enough: AR (so a few unlucky verdicts at the start do not hold every answer at AR)."""
    def policy_with(accepted, rejected):
        costs = fitted_costs()
        step = costs.estimate().step_tokens * T
        costs.observe_draft(0.25 * step, 1)
        costs.observe_verifier(1, 0.25 * step)
        policy = AdaptiveDepth("sync", initial=2, max_depth=8, costs=costs)
        policy.acceptance.add(1, accepted, rejected, 1.0, 1.0)
        return policy.cost_estimate()

    few, many = policy_with(1.0, 2.0), policy_with(75.0, 125.0)
    assert few.alpha == pytest.approx(0.375) and many.alpha == pytest.approx(0.375, abs=0.002)
    assert few.planned_depth == 1 and many.planned_depth == 0


def test_one_accepted_draft_never_plans_deep_where_its_estimate_says_ar():
    """Branches at B(n) = 1 + 0.15(n − 1) (a CPU pair's fit that has drifted), c = 0.6, j = 0. After one
    accepted draft (α̂ 0.75 ± 0.31) α̂ says AR; one standard error up (α 0.999) the best round is deep, γ ≥ 6.
    The plan drafts one step to learn more, never the deep round."""
    costs = fitted_costs(slope=0.15, loads=(0, 1, 2))
    step = costs.estimate().step_tokens * T
    costs.observe_draft(0.6 * step, 1)
    policy = AdaptiveDepth("sync", initial=2, max_depth=8, costs=costs)
    policy.acceptance.add(1, 1.0, 0.0, 1.0, 1.0)
    assert policy.planner.best_plan(policy.estimates()).depth == 0 and policy.planner.best_plan(policy.estimates(), optimistic=True).depth >= 6
    assert policy.cost_estimate().planned_depth == 1
    policy.acceptance.add(1, 40.0, 0.0, 1.0, 1.0)  # α̂ well known and high: the plan drafts as deep as pays
    assert policy.cost_estimate().planned_depth >= 6


def test_the_demo_says_what_it_measured_decided_and_projects(capsys):
    from rich.console import Console

    from lookahead_reasoning.cli.display import describe_costs, print_cost_story
    from lookahead_reasoning.runtime.results import LookaheadResult, RunStats

    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    policy.measure_drafting = True  # the demo drafts once, for the report
    learn(policy, float, rounds=40)  # a CPU: B(n) = n
    estimate = policy.cost_estimate()
    result = LookaheadResult(text="", answer=None, steps=[], round_log=[],
                             stats=RunStats(acceptance_rate=1.0, cost_model=estimate))
    print_cost_story(Console(width=200), result)
    out = capsys.readouterr().out
    assert "B(3) = 3.00" in out and "c = 0.10" in out and "α = 1.00" in out
    assert "branches cost up to 5.0× one step here, so LR would lose: running as AR" in out
    assert "projection (theory, not a measurement)" in out
    assert "γ = 0" not in out.split("projection")[1]  # at free branches the same α drafts
    assert describe_costs(estimate).endswith("→ AR, expected 1.00× AR")


def test_the_demo_prints_the_plan_it_made_before_the_question_beside_what_the_question_measured():
    from lookahead_reasoning.cli.display import plan_check, plan_line
    from lookahead_reasoning.runtime.results import CostEstimate
    from lookahead_reasoning.runtime.results import BaselineResult, LookaheadResult, RunStats

    result = LookaheadResult(text="", answer=None, steps=[], round_log=[],
                             stats=RunStats(acceptance_rate=0.75, wall_time_s=40.0, output_tokens=240))
    base = BaselineResult(text="", answer=None, wall_time_s=44.0, output_tokens=200, finish="eos")
    drafting = CostEstimate(planned_depth=3, planned_width=1, expected_speedup=1.08, alpha=0.83)
    assert plan_check(drafting, result, base) == (  # 6 tokens/s against 200/44: 1.32× per token, 1.10× in wall time
        "planned: γ = 3, expected 1.08× AR at α̂ = 0.83; measured 1.32× per token (1.10× in wall time) at α = 0.75")
    assert plan_line(CostEstimate(planned_depth=0, expected_speedup=1.0)).startswith("planned: AR")
    assert plan_line(CostEstimate(planned_depth=1)) == "planned: nothing yet (the policy is still learning the costs)"
    assert plan_line(None) == plan_line(CostEstimate())


def test_the_planner_plans_from_the_estimates_it_is_given():
    """The planner holds no state: the same estimates give the same plan. Before the lone target step is timed,
    AR; before the slope is known, AR (which a fork probe joins), or the initial γ for the async chain pipeline,
    which cannot fork; with free branches, a cheap draft and α = 0.9, deep; measured rates that say drafting
    rounds gain under 3 % overrule that, and the async chain's cold-start drafting too: AR."""
    from lookahead_reasoning.runtime.adaptive.cost_model import CostModel
    from lookahead_reasoning.runtime.adaptive.planner import Estimates, Plan, Planner

    def estimates(costs, gain=None):
        return Estimates(costs, answers=1, alpha_at=lambda width, optimistic=False: 0.9, ar_step=1.0, gain=gain)

    sync, chain = Planner("sync", width=1, initial=3, max_depth=8), Planner("async", width=1, initial=3, max_depth=8)
    costs = CostModel()
    assert sync.plan(estimates(costs)).depth == 0 and chain.plan(estimates(costs)).depth == 0
    costs.observe_target(1, TOKENS * T, TOKENS)  # a lone step
    assert sync.plan(estimates(costs))[:2] == (0, 1) and chain.plan(estimates(costs))[:2] == (3, 1)
    assert chain.plan(estimates(costs, gain=0.3)) == Plan(0, 1, 1.0)  # its drafting rounds ran 0.3× AR: no more
    assert chain.plan(estimates(costs, gain=1.5))[:2] == (3, 1)
    costs = fitted_costs()  # free branches
    costs.observe_draft(0.1 * TOKENS * T, 1)
    plan = sync.plan(estimates(costs))
    assert plan.depth >= 4 and plan.speedup > 2 and sync.plan(estimates(costs)) == plan
    assert sync.plan(estimates(costs, gain=1.02)) == Plan(0, 1, 1.0)


def test_trees_are_capped_where_their_leaves_would_pass_the_node_budget():
    from lookahead_reasoning.runtime.adaptive.planner import depth_limit
    from lookahead_reasoning.runtime.adaptive.tuning import TREE_NODE_BUDGET

    assert TREE_NODE_BUDGET == 16
    assert depth_limit(8, 1) == 8 and depth_limit(8, 2) == 4 and depth_limit(8, 4) == 2 and depth_limit(3, 2) == 3


def test_the_demo_names_the_draft_as_the_reason_where_branches_are_free_but_ar_wins(capsys):
    from rich.console import Console

    from lookahead_reasoning.runtime.results import CostEstimate
    from lookahead_reasoning.cli.display import print_cost_story
    from lookahead_reasoning.runtime.results import LookaheadResult, RunStats

    estimate = CostEstimate(branch_cost={2: 1.0, 3: 1.01, 5: 1.02}, branch_slope=0.005, c=0.6, j=0.1,
                            planned_depth=0, alpha=0.4)
    result = LookaheadResult(text="", answer=None, steps=[], round_log=[],
                             stats=RunStats(acceptance_rate=0.4, cost_model=estimate))
    print_cost_story(Console(width=200), result)
    out = capsys.readouterr().out
    assert "branches are nearly free here, but at c = 0.60 and α = 0.40 drafting would give at most 0.82× AR" in out


def test_streamed_rounds_are_priced_by_a_replay_of_the_runs_own_step_lengths():
    """Rule 4 for rounds that end at their decision: once REPLAY_STEPS lengths are known, a round of γ is priced
    by the replay of those lengths (round_rules.py), not by the equal-step theory; before that, by the theory."""
    from lookahead_reasoning.runtime.adaptive.planner import Estimates, Planner
    from lookahead_reasoning.runtime.adaptive.tuning import REPLAY_DRAWS, REPLAY_STEPS, STREAMED_MAX_ANSWERS
    from lookahead_reasoning.runtime.adaptive.round_rules import RuleCosts, speedup

    def estimates(costs):
        return Estimates(costs, answers=1, alpha_at=lambda width, optimistic=False: 0.7, ar_step=1.0)

    streamed = Planner("sync", width=1, initial=1, max_depth=4, rule="decision")
    batched = Planner("sync", width=1, initial=1, max_depth=4)
    costs = fitted_costs()  # free branches
    costs.observe_draft(0.45 * TOKENS * T, 1)
    costs.observe_step_lengths([20] * (REPLAY_STEPS - 1))
    assert streamed.speedup(estimates(costs), 1, 1, 0.7, 0.45, 0.1) == batched.speedup(estimates(costs), 1, 1, 0.7,
                                                                                         0.45, 0.1)
    lengths = [5, 80, 12, 60, 17, 40, 90, 25, 33, 8]  # unequal, as real steps are
    costs.observe_step_lengths(lengths)
    known = costs.step_lengths()
    for depth in (1, 2):
        rule_costs = RuleCosts(target_token_s=1.0, c=0.45, judge_s=0.1 * sum(known) / len(known),
                               widths=tuple((n, round(costs.branch_cost(n), 2)) for n in range(2, depth + 2)))
        expected = speedup([known], rule_costs, "decision", depth, 0.7, REPLAY_DRAWS)
        assert streamed.speedup(estimates(costs), depth, 1, 0.7, 0.45, 0.1) == pytest.approx(expected)
    # trees are batched forks: priced by the theory whatever the rule
    assert streamed.speedup(estimates(costs), 2, 2, 0.7, 0.45, 0.1) == batched.speedup(estimates(costs), 2, 2, 0.7,
                                                                                         0.45, 0.1)
    # so are chains where more answers share the policy than stream their forks (engine.py's `_streams`)
    crowded = Estimates(costs, answers=STREAMED_MAX_ANSWERS + 1, alpha_at=lambda width, optimistic=False: 0.7,
                        ar_step=1.0)
    assert streamed.speedup(crowded, 2, 1, 0.7, 0.45, 0.1) == batched.speedup(crowded, 2, 1, 0.7, 0.45, 0.1)


def test_a_replayed_price_is_kept_until_more_step_lengths_are_seen(monkeypatch):
    """A replay is priced once per REPLAY_STEPS new step lengths while its inputs hold to two decimals: repriced
    every round, the planning would lengthen every round under the policy's lock."""
    from lookahead_reasoning.runtime.adaptive import planner
    from lookahead_reasoning.runtime.adaptive.tuning import REPLAY_STEPS

    replays = []
    real = planner.replayed_speedup
    monkeypatch.setattr(planner, "replayed_speedup", lambda *args: replays.append(args) or real(*args))
    streamed = planner.Planner("sync", width=1, initial=1, max_depth=4, rule="decision")
    costs = fitted_costs()
    costs.observe_draft(0.45 * TOKENS * T, 1)
    costs.observe_step_lengths([5, 80, 12, 60, 17, 40, 90, 25])
    e = planner.Estimates(costs, answers=1, alpha_at=lambda width, optimistic=False: 0.7, ar_step=1.0)
    first = streamed.speedup(e, 2, 1, 0.7, 0.45, 0.1)
    costs.observe_step_lengths([30] * (REPLAY_STEPS - 1))  # rounds go by: the costs change, the generation not
    assert streamed.speedup(e, 2, 1, 0.701, 0.451, 0.1) == first and len(replays) == 1
    costs.observe_step_lengths([30])
    assert streamed.speedup(e, 2, 1, 0.7, 0.45, 0.1) != first and len(replays) == 2  # the new lengths count
    streamed.speedup(e, 2, 1, 0.72, 0.45, 0.1)
    assert len(replays) == 3  # and so does another α̂
