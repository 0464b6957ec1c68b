"""The online cost model on scripted timings, and the adaptive policy that plans with it."""

import queue
import random
import statistics
import time
import threading
from contextlib import contextmanager

import pytest

from lookahead_reasoning.runtime.cost_model import MAX_SLOPE, CostModel
from lookahead_reasoning.runtime.depth import (
    AR_STRETCH_SECONDS, AR_STRETCH_STEPS, PROBE_BACKOFF, PROBE_BUDGET, PROBE_SHARE, RATIONED_OVERHEAD, AcceptanceTally,
    AdaptiveDepth, RoundPlan,
)
from lookahead_reasoning.runtime.results import JudgedDraft, RoundRecord, StepRecord
from lookahead_reasoning.runtime.theory import engine_speedup, free_branches, tree_branches

TOKENS = 20  # tokens per step
T = 0.05  # seconds per target token alone


def round_record(depth, accepted, positions, *, branch_cost, c=0.1, judge_s=0.0, probe=0, stretch=0, width=1):
    """A sync round of γ = depth on servers where a fork of n branches costs branch_cost(n) steps
    (`probe`: the tokens of a fork probe's short second branch beside an AR round's step; `stretch`:
    the tokens of an AR round that wrote several steps in one request); never a run's first round, which
    is not timed."""
    branches = tree_branches(depth, width) if depth else 1
    tokens = stretch or TOKENS
    judged = [JudgedDraft(draft="d", target="t", accept=True, score=1.0, method="judge")] * positions
    share = min(probe, TOKENS) / TOKENS  # of the step, the probe's branch ran beside it for this share
    target_s = tokens * T * (branch_cost(branches) + (branch_cost(2) - 1) * share)
    return RoundRecord(
        index=1, depth=depth, judged=judged if depth else [], accepted=accepted, positions=positions, kept=[],
        finished=False, started=0.0, draft_s=depth * TOKENS * T * c, target_s=target_s,
        judge_s=judge_s if depth else 0.0, wall_s=1.0, branches=branches, target_tokens=tokens,
        draft_tokens=depth * TOKENS, draft_steps=depth, probe_tokens=probe, target_steps=tokens // TOKENS, width=width,
        target_tokens_all=tokens * branches + min(probe, TOKENS),
    )


def test_estimates_from_scripted_timings():
    model = CostModel(forget=1.0)  # no forgetting: plain least squares, to check by hand
    per_token = lambda active: 0.05 * (1 + 0.7 * (active - 1))  # noqa: E731  t₁ = 0.05 s, s = 0.7
    model.observe_target(1, 20 * per_token(1), 20)  # a lone step
    model.observe_target(3, 20 * per_token(3), 20)  # a fork of 3
    model.observe_target(1, 20 * per_token(5), 20, others=4)  # a lone step while other runs had 4 in flight
    model.observe_draft(0.76, 2)  # two steps of 0.38 s (a target step: 1 s): c = 0.38
    model.observe_judge(2, 0.5)
    assert model.branch_cost(1) == pytest.approx(1.0)
    assert model.branch_cost(3) == pytest.approx(1 + 0.7 * 2)  # one run: B(n) = 1 + s(n - 1)
    assert model.branch_cost(3, concurrency=4) == pytest.approx((1 + 0.7 * 11) / (1 + 0.7 * 3))  # t(C·n) / t(C)
    assert model.c() == pytest.approx(0.38)
    # j(n) = judge seconds per round / one target step (20 tokens × 0.05 s = 1 s); a judge fork of 2 pairs cost B(2)
    assert model.judge_cost(4) == pytest.approx(0.5 / model.branch_cost(2) * model.branch_cost(4))
    # under 4 runs, in target steps at that load (AR's step there, which B(n) is relative to): 1 + 0.7·3 times as long
    assert model.c(concurrency=4) == pytest.approx(0.38 / (1 + 0.7 * 3))
    assert model.judge_cost(1, concurrency=4) == pytest.approx(model.judge_cost(1) / (1 + 0.7 * 3))
    assert model.estimate(concurrency=4).c == pytest.approx(0.38 / (1 + 0.7 * 3))
    estimate = model.estimate()
    assert estimate.branch_slope == pytest.approx(0.7) and estimate.c == pytest.approx(0.38)
    assert estimate.target_s_per_token == pytest.approx(0.05)
    assert estimate.branch_cost[3] == pytest.approx(2.4, abs=1e-3) and estimate.j == pytest.approx(0.5 / 1.7)


def test_steps_of_nearly_one_length_still_show_the_slope():
    # timings from `lookahead serve` on simulated servers (0.03 s/token, slope 1): lone steps of 6-7
    # tokens, then steps under a load of about 14 other requests. With L nearly constant, o and t₁ are
    # nearly collinear: an unconstrained fit would give t₁ ≤ 0 and throw the slope away (B = 1 under load)
    model = CostModel()
    for tokens, seconds, others in [(6, 0.179, 0.0), (6, 0.181, 0.67), (6, 0.182, 1.0), (6, 0.181, 1.0),
                                    (7, 0.181, 0.86), (7, 2.100, 13.9)]:
        model.observe_target(1, seconds, tokens, others)
    estimate = model.estimate()
    assert estimate.branch_slope > 0.5 and estimate.target_s_per_token > 0
    assert estimate.request_overhead_s >= 0


def test_after_load_falls_probes_on_steps_of_one_length_bring_the_slope_down():
    # the same servers: a load of ~14 other requests, then only lone steps and fork probes (x = 0.67)
    # that cost nothing extra. With o fitted from steps of 6-7 tokens, t₁ came out near 0 and s = 1.5 stuck
    model = CostModel()
    for _ in range(8):
        model.observe_target(1, 2.1, 7, 13.9)
    for _ in range(30):  # forgetting 0.8 per request: the old loaded requests weigh 1e-6 after these 60
        model.observe_target(1, 0.180, 6)
        model.observe_target(1, 0.182, 6, 0.67)
    assert model.estimate().branch_slope < 0.1


def test_under_load_branches_stop_being_free():
    model = CostModel()
    model.observe_target(1, 1.0, 20)
    model.observe_target(3, 1.0, 20)  # a GPU that batches freely: s = 0
    assert model.branch_cost(3, concurrency=64) == pytest.approx(1.0)
    slow = CostModel()
    slow.observe_target(1, 1.0, 20)
    slow.observe_target(3, 1.5, 20)  # s = 0.25: cheap for one run...
    assert slow.branch_cost(3) == pytest.approx(1.5)
    assert slow.branch_cost(3, concurrency=64) > 2.9  # ...but at 64 concurrent runs nearly linear


def test_estimates_forget_so_they_follow_a_change_in_load():
    model = CostModel(forget=0.8)
    model.observe_target(1, 1.0, 20)
    for _ in range(10):
        model.observe_target(3, 1.0, 20)  # idle: B(3) = 1
    assert model.branch_cost(3) == pytest.approx(1.0)
    for _ in range(15):
        model.observe_target(3, 3.0, 20)  # loaded: B(3) = 3
    assert model.branch_cost(3) > 2.8


def test_with_many_runs_sharing_the_model_forgetting_is_per_run_round():
    """64 runs share the model: the memory spans a few rounds of each run, so one request of each run
    at a new cost moves the estimate by a few rounds' worth, not all the way (per observation, 0.8 would
    keep less than a round of each run)."""
    shared, alone = CostModel(forget=0.8), CostModel(forget=0.8)
    for _ in range(64 * 5):
        shared.observe_target(1, 1.0, 20, runs=64)  # 0.05 s per token
        alone.observe_target(1, 1.0, 20)
    for _ in range(64):  # a burst: every run's next request 8 % slower (within the fit's inliers: full weight)
        shared.observe_target(1, 1.08, 20, runs=64)
        alone.observe_target(1, 1.08, 20)
    assert alone.estimate().target_s_per_token == pytest.approx(0.054, rel=1e-3)  # swamped by the burst
    assert shared.estimate().target_s_per_token == pytest.approx(0.05 + 0.004 * 0.2 / (1 - 0.8**6), abs=1e-4)


def _sixteen_runs(model: CostModel, rng: random.Random, observations: int, per_token: float = 0.005,
                  slope: float = 0.0, noise: float = 0.02) -> None:
    """Requests of 16 runs, `per_token` seconds a token alone, times (1 + `slope` × the others in flight): one, two
    or eight steps beside 10 to 30 others (runs drafting and not), timed by the server to within `noise`, with 3 ms
    more in the client."""
    for _ in range(observations):
        tokens, others = rng.choice([17, 34, 136]), rng.uniform(10, 30)
        server = per_token * tokens * (1 + slope * others) * rng.uniform(1 - noise, 1 + noise)
        model.observe_target(1, server + 0.003, tokens, others, runs=16, server_seconds=server)


def test_a_stall_of_the_server_does_not_read_as_a_slope():
    """A moment's stall slows every request in flight, and more are in flight at a higher load (they pile up):
    16 runs drafting at slope 0, and requests beside 38 to 48 others take 2.5 times their time per token for a
    moment. At full weight the fit would price B(2) at 1.64 here."""
    model, rng = CostModel(), random.Random(0)
    _sixteen_runs(model, rng, 200)
    for others in (38, 40, 42, 44, 46, 48):
        model.observe_target(1, 0.216, 17, others, runs=16, server_seconds=0.213)
    assert model.branch_cost(2, 16) < 1.05


def test_a_change_that_lasts_is_followed_within_a_few_rounds_of_each_run():
    """Outliers count against the typical residual, which each residual moves: a server that stays 2.5 times
    slower (other tenants' requests) is in the fit within eight rounds of each of 16 runs, about as an
    unweighted fit would be (11.1 ms a token against 11.3: the fit's own memory), and one whose branches stop
    being free (a slope of 1 from then on) within ten more."""
    model, rng = CostModel(), random.Random(0)
    _sixteen_runs(model, rng, 200)
    _sixteen_runs(model, rng, 16 * 8, per_token=0.0125)
    assert model.estimate(16).target_s_per_token > 0.010
    _sixteen_runs(model, rng, 16 * 10, per_token=0.0125, slope=1.0)
    assert model.branch_cost(2, 16) == pytest.approx(31 / 16, rel=0.05)


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
    """One run at α = 0.7: a memory forgetting 0.9 a round reads α̂ from about 25 positions, and its estimates
    stray by about ±0.09; the long memory's by under half of that."""
    rng = random.Random(7)
    rounds = _chain_rounds(rng, 0.7, 600)
    long = _tally_after(rounds)[100:]
    short = _tally_after(rounds, slow_forget=0.9)[100:]  # the short memory alone
    assert statistics.pstdev(long) < 0.5 * statistics.pstdev(short)
    assert abs(statistics.mean(long) - 0.7) < 0.03


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


def test_a_burst_of_every_runs_last_round_does_not_swamp_the_shared_alpha():
    """16 runs at α = 0.5, then every run's last round, all accepted up to the end (no rejection to
    see): α̂ moves by about one round of each run; forgetting per round of any run forgot the rest."""
    def policy_after_burst(runs: int) -> float:
        policy = AdaptiveDepth("sync", initial=2, max_depth=8)
        for _ in range(runs):
            policy.run_started()
        for _ in range(10 * 16):
            policy.observe(round_record(2, 1, 2, branch_cost=lambda n: 1.0))  # half the positions accepted
        for _ in range(16):
            policy.observe(round_record(4, 4, 4, branch_cost=lambda n: 1.0))
        return policy.alpha

    assert policy_after_burst(1) > 0.9
    assert 0.5 < policy_after_burst(16) < 0.65


def test_a_short_fork_probe_measures_the_slope():
    """The probe's branch runs beside the step for k of its L tokens: time per token t₁(1 + s·k/L)."""
    model = CostModel(forget=1.0)
    model.observe_target(1, 20 * 0.05, 20)  # a lone step: 0.05 s per token
    model.observe_target(1, 20 * 0.05 * (1 + 0.8 * 5 / 20), 20, others=5 / 20)  # a 5-token probe beside it, s = 0.8
    assert model.estimate().branch_slope == pytest.approx(0.8) and model.branch_cost(3) == pytest.approx(2.6)


@pytest.mark.parametrize("stretch, step", [(90, 19), (92, 21), (85, 20), (88, 18)])
def test_the_first_probe_beside_one_stretch_reads_as_a_slope_not_a_fixed_cost(stretch, step):
    """Two requests (an AR stretch alone, then a step with a 4-token probe beside it, on a linear server)
    fit a fixed cost o and a slope u equally well; float noise would pick one, and o means B(2) = 1 and
    a drafted round on a CPU. The slope is the safe reading."""
    model = CostModel(forget=1.0)
    model.observe_target(1, stretch * 0.39, stretch, steps=4)
    model.observe_target(1, (step + 4) * 0.39, step, others=4 / step)
    assert model.estimate().branch_slope == pytest.approx(1.0)
    assert model.branch_cost(2) == pytest.approx(2.0)


@pytest.mark.parametrize("tokens, seconds", [(80, 38.2), (78, 38.2), (84, 39.6), (80, 39.0)])
def test_lone_steps_of_about_one_length_do_not_fit_a_fixed_cost_that_a_short_probe_then_pays(tokens, seconds):
    """The CPU Qwen pair's first rounds: a lone step (82 tokens, 39.4 s), a fork probe whose 10-token step
    took 9.4 s (B(2) ≈ 1.96), then an AR stretch alone, the same time per token within a few per cent.
    Only the probe is short; 1/L's spread is the load's. Fitting o there would read the stretch's noise as
    o = 5 s that explains the probe (B(2) = 1.00, and a measuring round over AR); the slope stays the probe's."""
    model = CostModel()
    model.observe_target(1, 39.4, 82)
    model.observe_target(2, 9.4, 10)
    model.observe_target(1, seconds, tokens, steps=2)
    assert model.estimate().request_overhead_s == 0.0
    assert model.branch_cost(2) == pytest.approx(1.96, abs=0.05)


def test_lengths_that_vary_at_one_load_still_fit_a_fixed_cost_beside_a_short_probe():
    """The same probe after lone steps of 10 to 80 tokens (o = 1 s, t₁ = 0.4 s): their lengths tell o apart,
    and the probe's extra time is the slope's (s = 1 for a bare token)."""
    model = CostModel(forget=1.0)
    for tokens in (10, 80, 25, 60):
        model.observe_target(1, 1.0 + tokens * 0.4, tokens)
    model.observe_target(2, 1.0 + 10 * 0.4 * 2, 10)
    estimate = model.estimate()
    assert estimate.request_overhead_s == pytest.approx(1.0)
    assert estimate.target_s_per_token == pytest.approx(0.4)
    mean = estimate.step_tokens
    assert model.branch_cost(2) == pytest.approx((1.0 + mean * 0.4 * 2) / (1.0 + mean * 0.4))


def _at_one_high_load(model, rounds=4):
    """64 runs on a linear server (t₁ = 5 ms): every request beside 62 to 66 others, the client's noise in
    timing them larger than what the load's spread adds (as in `bench --load`)."""
    for _ in range(rounds):
        for others, noise in ((62, 1.04), (64, 1.0), (66, 0.96), (63, 1.03), (65, 0.98)):
            model.observe_target(1, 16 * 0.005 * 65 * noise, 16, others=others)


def test_requests_all_at_one_high_load_read_the_slope_as_linear():
    """The bounded fit there is u = 0 with t₁ the whole time per token, 65 times too high: branches free,
    γ = 8 on a linear server. Loads that barely vary cannot tell; the safe reading is linear."""
    model = CostModel(forget=1.0)
    _at_one_high_load(model)
    assert model.estimate(64).branch_slope == pytest.approx(1.0)
    assert model.branch_cost(2, concurrency=64) == pytest.approx(2.0, abs=0.02)


def _four_runs_always_in_flight(model, slope, noise):
    """Four runs that stay at AR on a server timing its own requests (t₁ = 5 ms, o = 5 ms): every request
    beside about 3 others, lone steps, 8-step stretches, and fork probes whose 4-token branch adds a quarter of
    a request beside a step; `noise`: each request's time off by up to this share, drawn independently."""
    draws = random.Random(3)
    rounds = [(16, 3.0), (136, 3.0), (16, 3.25), (136, 2.9), (16, 3.1), (119, 3.0)] * 4
    for tokens, others in rounds:
        server_s = (0.005 + tokens * 0.005 * (1 + slope * others)) * (1 + noise * draws.uniform(-1, 1))
        model.observe_target(1, server_s + 0.004, tokens, others=others, steps=max(1, tokens // 16),
                             runs=4, server_seconds=server_s)
    return model.estimate(4)


@pytest.mark.parametrize("slope, noise, low, high", [(0.0, 0.01, 0.0, 0.1), (1.0, 0.01, 0.8, 1.5), (0.0, 0.2, 0.8, 1.5)])
def test_steady_server_times_tell_the_slope_where_the_load_barely_varies(slope, noise, low, high):
    """Loads of 2.9 to 3.25 others vary too little for a client's timings, whose noise may line up with the
    load (the tests above). The server's own times are steady enough: their slope's standard error is small,
    and the fit stands; where they scatter (20 %), it cannot tell, and the slope reads linear, the safe side."""
    estimate = _four_runs_always_in_flight(CostModel(), slope, noise)
    assert low <= estimate.branch_slope <= high  # linear: 0.9 of a step that includes the client's 4 ms


def test_at_one_high_load_the_time_alone_comes_from_the_lighter_load_seen_before():
    model = CostModel()
    for others in (0, 1, 3, 0, 2, 4, 0, 1) * 2:  # lighter, varied load first: t₁ = 5 ms, linear
        model.observe_target(1, 16 * 0.005 * (1 + others), 16, others=others)
    _at_one_high_load(model, rounds=8)  # the fast fit has forgotten the light load; the slow one has not
    assert model.estimate(64).target_s_per_token < 0.01  # not the local fit's 0.32 s (u = 0)
    assert model.branch_cost(2, concurrency=64) == pytest.approx(2.0, abs=0.05)


def test_one_runs_stretches_long_after_a_probe_keep_the_probes_slope():
    """One run while AR wins on a linear server: a probe, then many AR stretches alone with a little noise.
    The fast fit's load is then a faded probe's (x̄ ≈ 0.004); the slope from its level over that load
    would be noise divided by almost nothing (0 or the bound, a flip of the decision). It stays the probe's."""
    model = CostModel()
    model.observe_target(1, 20 * 0.05, 20)
    model.observe_target(1, 20 * 0.05 * (1 + 5 / 20), 20, others=5 / 20)  # a 5-token probe beside it, s = 1
    for k in range(12):
        model.observe_target(1, 160 * 0.05 * (1.02 if k % 2 else 0.98), 160, steps=8)
    assert model.estimate().branch_slope == pytest.approx(1.0, abs=0.1)


def test_time_per_token_growing_faster_than_in_proportion_to_the_load_reads_as_the_steepest_slope():
    """y = 5 ms · (x − 5): within t₁ > 0 and u ≥ 0 with the bound slack, the best fit is u = 0 (branches free);
    the best fit within the bound has the bound binding."""
    model = CostModel(forget=1.0)
    for others in (10, 20, 30) * 3:
        model.observe_target(1, 16 * 0.005 * (others - 5), 16, others=others)
    assert model.estimate(16).branch_slope == pytest.approx(MAX_SLOPE)


def test_a_fixed_cost_per_request_is_fitted_so_step_length_does_not_fake_a_slope():
    """T = o + L·t₁(1 + s·x): steps of 10 to 80 tokens with o = 1 s, t₁ = 0.4 s (a CPU); a probe beside one."""
    model = CostModel(forget=1.0)
    for tokens in (10, 80, 25, 60):
        model.observe_target(1, 1.0 + tokens * 0.4, tokens)
    model.observe_target(1, 1.0 + 40 * 0.4 * (1 + 1.0 * 0.25), 40, others=0.25)  # s = 1
    estimate = model.estimate()
    assert estimate.target_s_per_token == pytest.approx(0.4)
    mean = estimate.step_tokens  # B(2) for a step of the mean length: the fixed cost is paid once
    assert estimate.request_overhead_s == pytest.approx(1.0)
    assert estimate.branch_slope == pytest.approx(mean * 0.4 / (1.0 + mean * 0.4))  # of the whole step
    assert model.branch_cost(2) == pytest.approx((1.0 + mean * 0.4 * 2) / (1.0 + mean * 0.4))


def test_the_server_time_is_fitted_so_a_client_slowing_under_load_does_not_fake_a_slope():
    """A server that batches for free (5 ms/token at any load) timed by a client that takes 2 ms more per
    request in flight beside it (threads on a few cores): the client's times read as a slope, the
    server's as none, and the client's share of a request becomes part of its fixed cost."""
    def observe(model, server_time):
        for others in (0, 1, 2, 3, 0.5, 2.5) * 4:
            server_s = 16 * 0.005
            client_s = server_s + 0.002 * (1 + others)
            model.observe_target(1, client_s, 16, others=others, server_seconds=server_s if server_time else None)
        return model.estimate()

    client, server = observe(CostModel(forget=1.0), False), observe(CostModel(forget=1.0), True)
    assert client.branch_slope > 0.01
    assert server.branch_slope == pytest.approx(0.0, abs=1e-9) and server.target_s_per_token == pytest.approx(0.005)
    assert server.request_overhead_s == pytest.approx(0.002 * (1 + 1.5))  # the client's mean share
    # a server time that is missing or longer than the client's (clocks apart) leaves the client's share at 0
    model = CostModel(forget=1.0)
    model.observe_target(1, 0.08, 16, server_seconds=0.09)
    model.observe_target(1, 0.08, 16, server_seconds=None)
    assert model.estimate().request_overhead_s == pytest.approx(0.0)


def test_a_forks_branches_count_by_their_tokens():
    """A fork of 3 whose other two branches wrote half as many tokens as the longest: on a server where every
    request in flight adds its full cost (s = 1), one other request was in flight on average, not two."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    lone = round_record(0, 0, 0, branch_cost=float)
    policy.observe(lone)
    fork = lone.model_copy(update={"branches": 3, "target_s": TOKENS * T * 2, "target_tokens_all": TOKENS * 2})
    policy.observe(fork)
    assert policy.costs.estimate().branch_slope == pytest.approx(1.0)


def test_no_data_means_no_change_and_missing_figures_are_harmless():
    model = CostModel()
    assert not model.ready and model.c() is None and model.branch_cost(4) == 1.0 and model.judge_cost(3) == 0.0
    model.observe_target(0, 1.0, 10)  # nothing to learn from: ignored
    model.observe_target(3, 0.0, 10)
    assert model.observations == 0
    policy = AdaptiveDepth("sync", initial=3, max_depth=8)
    assert policy.next_round() == RoundPlan(0)  # first the target alone: the lone step
    policy.observe(round_record(0, 0, 0, branch_cost=float))
    plan = policy.next_round()  # then a quarter of the same step once more in the fork: B(2)
    assert plan.depth == 0 and plan.probe_tokens == TOKENS // 4
    probe = plan.probe_tokens
    free = lambda n: 1.0  # noqa: E731
    policy.observe(round_record(0, 0, 0, branch_cost=free, probe=probe))
    plans = [policy.next_round() for _ in range(3)]
    assert [p.depth for p in plans] == [1, 1, 1]  # branches may pay: one step measures c, j
    assert all(p.measuring for p in plans)  # ...and the target writes only its own step beside it
    assert policy.cost_estimate().expected_speedup is None


def _learn(policy, branch_cost, accept_all=True, rounds=30):
    drafted = 0
    for _ in range(rounds):
        plan = policy.next_round()
        depth, probe = plan.depth, plan.probe_tokens
        accepted = depth if accept_all else 0
        positions = depth if accept_all else min(depth, 1)
        policy.observe(round_record(depth, accepted, positions, branch_cost=branch_cost, probe=probe,
                                    stretch=plan.stretch_tokens))
        drafted += depth > 0
    return drafted


def test_policy_runs_ar_when_branches_cost_linear_time_even_at_full_acceptance():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    linear = float  # B(n) = n: a CPU, or a busy GPU
    assert _learn(policy, linear, rounds=200) == 0  # it never drafts: even free, perfect drafts could not pay
    assert policy.costs.branch_cost(3) == pytest.approx(3.0)
    assert policy.cost_estimate().planned_depth == 0
    probes = steps = 0
    for _ in range(300):
        plan = policy.next_round()
        assert plan.depth == 0
        policy.observe(round_record(0, 0, 0, branch_cost=linear, probe=plan.probe_tokens, stretch=plan.stretch_tokens))
        probes += bool(plan.probe_tokens)  # the probes fork the target alone: cheap, and they watch the load
        steps += plan.stretch_tokens // TOKENS or 1  # between probes, AR rounds write several steps at once
    spacing = policy.probe_spacing()
    assert probes >= 1 and spacing >= 6 and probes <= steps // spacing + 1
    # what the probes cost stays in budget: a quarter step's second branch every `spacing` rounds
    assert (policy.costs.branch_cost(2) - 1) * PROBE_SHARE / spacing <= PROBE_BUDGET


@pytest.mark.parametrize("slope, drafts", [(0.9, False), (0.5, True)])
def test_branches_nearly_linear_rule_drafting_out_before_a_measuring_draft(slope, drafts):
    """At s = 0.9 free, always accepted drafts would still gain 9/(1 + 8·0.9) = 1.10× at γ = 8, but no
    real draft would: the policy does not spend a drafted round to measure c and j. At s = 0.5 it does."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    assert (_learn(policy, lambda n: 1.0 + slope * (n - 1), rounds=40) > 0) is drafts
    assert policy.costs.estimate().branch_slope == pytest.approx(slope, rel=0.02)


def test_while_ar_wins_ar_rounds_write_several_steps_in_one_request():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    _learn(policy, float, rounds=40)  # B(n) = n: AR wins; a step takes 20 tokens × 0.05 s = 1 s
    plans = []
    for _ in range(40):
        plans.append(policy.next_round())
        policy.observe(round_record(0, 0, 0, branch_cost=float, probe=plans[-1].probe_tokens,
                                    stretch=plans[-1].stretch_tokens))
    stretches = [p.stretch_tokens // TOKENS for p in plans if p.stretch_tokens]
    # as many steps as fit in AR_STRETCH_SECONDS, at most AR_STRETCH_STEPS, and never past the next probe
    assert stretches and max(stretches) == min(AR_STRETCH_STEPS, int(AR_STRETCH_SECONDS / (TOKENS * T)))
    assert max(stretches) < policy.probe_spacing()
    # never cut short to meet a probe's turn (the probe comes a little late): a request's fixed cost for a
    # few steps, and under many runs sharing the count, every run's stretch would be cut near the turn
    assert set(stretches) == {max(stretches)}
    assert all(p.stretch_tokens == 0 for p in plans if p.probe_tokens)  # a probe round is one step
    assert policy.costs.estimate().step_tokens == pytest.approx(TOKENS)


def test_where_a_request_costs_as_much_as_a_step_ar_stretches_grow_to_keep_that_cost_small():
    """A client short of CPU (many runs): every request pays about a step's time before its tokens. Eight
    steps per stretch would spend 11 % of the time on that; the stretch grows until it is 2 %."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    _learn(policy, float, rounds=40)  # AR wins; requests have no fixed cost yet
    assert policy._stretch(None)[0] == AR_STRETCH_STEPS
    for steps in [2, 4, 8, 3, 6, 8, 5, 7] * 25:  # stretches of several lengths, each paying o = 1 s (a step's time)
        policy.costs.observe_target(1, 1.0 + steps * TOKENS * T, steps * TOKENS, steps=steps)
    estimate = policy.costs.estimate()
    assert estimate.request_overhead_s == pytest.approx(1.0, rel=0.1)
    steps, tokens = policy._stretch(None)
    assert steps > AR_STRETCH_STEPS and tokens == steps * round(estimate.step_tokens)
    step_s = estimate.step_tokens * estimate.target_s_per_token
    assert estimate.request_overhead_s / (estimate.request_overhead_s + steps * step_s) <= 0.02 + 1e-9
    assert steps * step_s <= AR_STRETCH_SECONDS + 1e-9
    # a run the drafting slots left out asks again sooner: the fewest steps that keep o within 4 %
    rationed = policy._stretch(None, rationed=True)[0]
    share = lambda k: estimate.request_overhead_s / (estimate.request_overhead_s + k * step_s)  # noqa: E731
    assert rationed < steps and share(rationed) <= RATIONED_OVERHEAD < share(rationed - 1)


def _fitted_costs(overhead=0.0, slope=0.0, loads=(0, 1)):
    """A cost model fitted to a server that batches for free (`slope` 0; else each other request in flight adds
    that share to a token's time): requests of 10–80 tokens, each paying `overhead` seconds, beside each of
    `loads` others."""
    costs = CostModel(forget=1.0)
    for tokens in (10, 20, 40, 80) * 3:
        for others in loads:
            costs.observe_target(1, overhead + tokens * T * (1 + slope * others), tokens, others=others)
    return costs


def test_drafting_is_priced_against_ar_as_it_runs_in_stretches_that_pay_the_fixed_cost_once():
    """The theory prices an AR step at S = o + L̄·t₁; AR rounds here write stretches of k steps that pay o once.
    Free branches, c = 0.2, no verifier cost, α = ½: a γ = 1 round beats AR at S by 1.5 / 1.2 = 1.25×. Where
    o is as long as the step's tokens (a client short of CPU), AR runs at (o/k + L̄·t₁)/S, about half of S,
    and drafting loses: AR."""
    def policy_with(overhead):
        costs = _fitted_costs(overhead)
        step = overhead + costs.estimate().step_tokens * T
        costs.observe_draft(0.2 * step, 1)  # c = 0.2
        policy = AdaptiveDepth("sync", initial=2, max_depth=1, costs=costs)
        policy._tallies[1] = AcceptanceTally()
        policy._tallies[1].add(50.0, 50.0, 1.0, 1.0)  # α̂ = ½
        return policy, policy.cost_estimate()

    policy, estimate = policy_with(0.0)
    assert estimate.planned_depth == 1 and estimate.expected_speedup == pytest.approx(1.25, rel=0.01)
    policy, estimate = policy_with(37.5 * T)  # the mean step's tokens take as long
    steps = policy._stretch(None)[0]
    share = estimate.request_overhead_s / (estimate.request_overhead_s + estimate.step_tokens * T)
    assert share == pytest.approx(0.5, rel=0.05) and steps > AR_STRETCH_STEPS
    assert estimate.planned_depth == 0  # drafting would advance at 1.25 × (1 − share · (1 − 1/k)) of AR
    assert policy._best(1, 0.5, 0.2, 0.0)[1] == 1.0


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
    from lookahead_reasoning.runtime.display import describe_costs

    assert describe_costs(estimate).endswith(f"(W = 2 would give {estimate.width_speedups[2]:.2f}×: staying at W = 1)")


def test_a_width_never_run_gets_its_alpha_as_if_candidates_were_independent():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8, width=4)
    policy.observe(round_record(2, 1, 2, branch_cost=float))  # chains: α₁ ≈ 0.5
    policy.observe(round_record(2, 1, 2, branch_cost=float))
    alpha_1 = policy.alpha_at(1)
    assert policy.alpha_at(2) == pytest.approx(1 - (1 - alpha_1) ** 2)
    assert policy.alpha_at(4) == pytest.approx(1 - (1 - alpha_1) ** 4)


def _timed(depth, seconds_per_token, stretch=0):
    """A round of γ = depth on free branches, every draft accepted (or an AR stretch of `stretch` tokens), that
    wrote its tokens at `seconds_per_token` (what the measured rates of drafting and AR rounds see)."""
    tokens = stretch or TOKENS * (depth + 1)
    kept = [StepRecord(text="s", source="draft", round=1)] * (tokens // TOKENS)
    return round_record(depth, depth, depth, branch_cost=lambda n: 1.0, stretch=stretch).model_copy(
        update={"output_tokens": tokens, "wall_s": tokens * seconds_per_token, "kept": kept,
                "started": time.perf_counter()})


@pytest.mark.parametrize("slowdown, probe_at_plan", [(2.0, False), (1.1, True), (1 / 1.02, True)])
def test_rounds_that_measure_slower_than_ar_win_over_the_model(slowdown, probe_at_plan):
    """The model says drafting pays (free branches), but the drafting rounds advance `slowdown` times slower
    than AR rounds (say the client runs out of CPU), or barely faster (2 %, under GAIN_TO_DRAFT: the rates
    lean toward drafting, and its slowest requests lose more): the policy runs AR, and drafts again when its drafted
    probes measure fast rounds. The probes run the model's γ (what the rates must measure again), unless
    such a round would lose more than the probe budget spreads over the longest spacing: then one step."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    free = lambda n: 1.0  # noqa: E731
    _learn(policy, free)
    planned = policy.cost_estimate().planned_depth
    assert planned >= 3 and policy.measured_gain() is None

    for _ in range(3):
        policy.observe(_timed(0, T))
        policy.observe(_timed(3, slowdown * T))
    # every draft accepted, α̂ just under 1: a round counts what its shape keeps on average at α̂ (1 % less)
    assert policy.measured_gain() == pytest.approx(1 / slowdown, rel=0.02)
    estimate = policy.cost_estimate()
    assert estimate.planned_depth == 0 and estimate.measured_gain == pytest.approx(1 / slowdown, rel=0.02)
    for _ in range(60):  # however many AR rounds go by, the measurement stands until probes measure again
        policy.observe(_timed(0, T))
    assert policy.measured_gain() == pytest.approx(1 / slowdown, rel=0.02)
    assert policy.cost_estimate().planned_depth == 0
    probes = []
    for _ in range(60):
        plan = policy.next_round()
        if plan.depth:
            probes.append(plan.depth)
            policy.observe(_timed(plan.depth, slowdown * T))
        else:  # AR stretches, which the probes are spaced by
            policy.observe(round_record(0, 0, 0, branch_cost=free, stretch=plan.stretch_tokens))
    # at half speed a round of γ = 8 (9 steps) loses 9 AR steps, more than 2 % of the longest spacing (8)
    assert probes and all(depth == (planned if probe_at_plan else 1) for depth in probes)
    for _ in range(30):
        policy.observe(_timed(1, T / 1.5))  # the load is gone: drafting rounds are fast again
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
        _learn(policy, lambda n: 1.0)
        policy._rates.clear(), policy._rounds_timed.clear()
        for _ in range(2):
            policy.observe(_timed(0, T))
            lucky = _timed(3, T)  # 4 steps in 4 step-times
            policy.observe(lucky.model_copy(update={"kept": lucky.kept[:kept_steps],
                                                    "output_tokens": kept_steps * TOKENS}))
        gains.append(policy.measured_gain())
    if mode == "sync":
        assert gains[0] == pytest.approx(gains[1], rel=1e-6) and gains[0] > 0.9
    else:
        assert gains[1] == pytest.approx(4 * gains[0], rel=1e-6)

def _slow_drafting_verdict(policy):
    """Free branches learned, then tens of drafting rounds measured 3× slower than AR rounds: AR."""
    _learn(policy, lambda n: 1.0)
    for _ in range(40):
        policy.observe(_timed(0, T))
        policy.observe(_timed(3, 3 * T))
    assert policy.cost_estimate().planned_depth == 0


def test_after_slow_drafting_rounds_one_fast_probe_of_a_run_alone_renews_the_measured_rate():
    """Tens of drafting rounds that measured slow (under load) must not keep one run at AR through probe after
    probe once drafting is fast again: a drafted probe after AR rounds outweighs them (else `lookahead
    serve` stays at AR long after the load has gone)."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    _slow_drafting_verdict(policy)
    probes = 0
    for _ in range(400):
        plan = policy.next_round()
        if not plan.depth:  # AR stretches, which the probes are spaced by
            policy.observe(_timed(0, T, stretch=plan.stretch_tokens))
            continue
        probes += 1
        policy.observe(_timed(plan.depth, T / 1.5))  # the load is gone: drafting is fast again
        if policy.cost_estimate().planned_depth:
            break
    assert policy.cost_estimate().planned_depth >= 1 and probes == 1

    # one probe that reads no faster than AR does not undo a clear verdict on its own
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    _slow_drafting_verdict(policy)
    for _ in range(40):
        policy.observe(_timed(0, T, stretch=AR_STRETCH_STEPS * TOKENS))
    policy.observe(_timed(1, T))
    assert policy.cost_estimate().planned_depth == 0


def test_with_other_runs_in_flight_a_probe_adds_to_the_drafting_rate():
    """A probe among 16 runs at AR is a lone drafted round, which gets more than its share of the server and
    reads fast: it adds to the rate like any round (were it to renew the rate, all 16 runs would draft
    after each probe)."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    _slow_drafting_verdict(policy)
    for _ in range(16):
        policy.run_started()
    for _ in range(3 * 16):  # three AR stretches of each run
        policy.observe(_timed(0, T, stretch=AR_STRETCH_STEPS * TOKENS))
    policy.observe(_timed(3, T / 1.5))
    assert policy.cost_estimate().planned_depth == 0


@pytest.mark.parametrize("fork_probe", [True, False])
def test_a_runs_first_round_is_never_a_probe(fork_probe):
    """A run's first round is not timed (it prefills the prompt): a probe due there comes in the next round,
    after a lone step (requests that each are one AR stretch met every drafted probe at a first round)."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    branch_cost = float if fork_probe else (lambda n: 1.0 + 0.6 * (n - 1))  # drafted probes: branches could pay
    _learn(policy, branch_cost, accept_all=False, rounds=60)
    assert policy._probe_is_a_fork() == fork_probe
    for _ in range(50):  # AR rounds until a probe is due
        plan = policy.next_round()
        if plan.probe_tokens or plan.depth:
            break
        policy.observe(round_record(0, 0, 0, branch_cost=branch_cost, stretch=plan.stretch_tokens))
    assert plan.probe_tokens or plan.depth
    policy.ar_rounds = policy.probe_spacing()  # the probe is due again, and the next round is a run's first
    assert policy.next_round(first=True) == RoundPlan(0)  # a lone step
    plans = [policy.next_round() for _ in range(2)]
    assert any(p.probe_tokens or p.depth for p in plans)  # then the probe (a fork probe after its lone step)


@contextmanager
def _runs_in_threads(policy, runs):
    """`runs` threads that stay alive (as runs of `lookahead serve` do, so that each keeps its identity); yields
    ask(i, finish=False, first=False): the next round's plan of run i (`first`: its first round), asked for from
    its thread; `finish`: that run then ends."""
    requests = [queue.Queue() for _ in range(runs)]
    replies = queue.Queue()

    def run(i):
        while (asked := requests[i].get()) is not None:
            first, finish = asked
            replies.put(policy.next_round(first=first))
            if finish:
                policy.run_finished()

    def ask(i, finish=False, first=False):
        requests[i].put((first, finish))
        return replies.get(timeout=10)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(runs)]
    for thread in threads:
        thread.start()
    try:
        yield ask
    finally:
        for i, thread in enumerate(threads):
            requests[i].put(None)
            thread.join()


def test_one_run_at_a_time_puts_a_due_probe_off_at_its_first_round():
    """Many runs starting while a probe is due: one writes a lone step and probes next; the first rounds of
    the others run on as AR stretches (all 64 of them wrote a lone step first)."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    _learn(policy, float, rounds=60)  # a linear server: AR, with fork probes
    policy.run_finished()
    for _ in range(3):
        policy.run_started()
    policy.ar_rounds = policy.probe_spacing()  # a probe is due
    with _runs_in_threads(policy, 3) as ask:
        firsts = [ask(i, first=True) for i in range(3)]
        assert firsts[0] == RoundPlan(0) and all(p.stretch_tokens for p in firsts[1:])
        ask(0, finish=True)  # the run that put it off ends after its lone step
        assert ask(1, first=True) == RoundPlan(0)  # so the next run's first round may put it off
        assert ask(1).probe_tokens  # and probes next (a fork probe: the lone step before it is written)


def test_policy_drafts_deep_when_branches_are_free():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    free = lambda n: 1.0  # noqa: E731  an idle GPU
    _learn(policy, free)
    assert policy.next_round().depth >= 4
    estimate = policy.cost_estimate()
    assert estimate.expected_speedup > 2 and estimate.branch_slope == pytest.approx(0.0)


def test_while_drafting_wins_ar_checks_keep_the_target_alone_measured_within_the_budget():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    free = lambda n: 1.0  # noqa: E731
    _learn(policy, free)
    checks = 0
    for _ in range(300):
        plan = policy.next_round()
        checks += plan.depth == 0
        policy.observe(round_record(plan.depth, plan.depth, plan.depth, branch_cost=free, probe=plan.probe_tokens))
    speedup = policy.cost_estimate().expected_speedup
    spacing = policy.check_spacing(speedup)
    assert checks == 300 // (spacing + 1)  # an AR round after every `spacing` drafting rounds
    # an AR round where drafting advances `speedup` times as fast loses 1 - 1/speedup of a round
    assert (1 - 1 / speedup) / spacing <= PROBE_BUDGET


def test_an_ar_check_due_at_a_runs_first_round_comes_in_its_next_round():
    """A run's first round is not timed: an AR check there would measure nothing and cost a round, a large
    share of a short run."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    _learn(policy, lambda n: 1.0)
    policy.drafting_rounds = policy.check_spacing(policy.cost_estimate().expected_speedup)  # a check is due
    assert policy.next_round(first=True).depth > 0
    assert policy.next_round() == RoundPlan(0)


def test_drafting_at_one_depth_does_not_settle_on_a_wrong_slope():
    # every drafting round at one γ fits any split of its time between t₁ and the slope; without AR
    # rounds now and then, a policy that drafted on free branches would keep drafting on linear ones
    policy = AdaptiveDepth("sync", initial=2, max_depth=8, forget=0.8)
    _learn(policy, lambda n: 1.0)
    _learn(policy, float, rounds=60)
    estimate = policy.cost_estimate()
    assert estimate.planned_depth == 0 and estimate.branch_slope == pytest.approx(1.0, abs=0.05)


def test_policy_backs_off_when_load_rises_and_drafts_again_when_it_falls():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8, forget=0.8)
    free, linear = (lambda n: 1.0), float
    _learn(policy, free)
    assert policy.next_round().depth >= 3
    _learn(policy, linear, rounds=60)  # load: probes and forks now cost linear time
    assert policy.cost_estimate().planned_depth == 0
    _learn(policy, free, rounds=400)  # load gone: the probes see it
    assert policy.cost_estimate().planned_depth >= 3


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_probe_spacing_bounds_the_probe_cost(mode):
    """A drafted probe loses against AR on every step it writes: a sync γ = 1 round keeps 1 + α steps, an
    async chain round goes on while its drafts are accepted (1 / (1 − α) steps); the spacing, counted in AR
    steps, spreads all of that within the budget."""
    policy = AdaptiveDepth(mode, initial=2, max_depth=8)
    slopeish = lambda n: 1.0 + 0.6 * (n - 1)  # noqa: E731  branches could pay, but drafting loses at α = ½
    _learn(policy, slopeish, accept_all=False, rounds=60)
    for _ in range(30):
        policy.observe(round_record(2, 1, 2, branch_cost=slopeish))
    assert not policy._probe_is_a_fork()
    alpha = policy.alpha_at(1)
    speedup = engine_speedup(mode, 1, alpha, policy.costs.c(), policy.costs.judge_cost(1),
                             branch_cost=policy.costs.branch_cost)
    gain = policy.measured_gain()
    speedup = speedup if gain is None else min(speedup, gain)
    steps = 1 + alpha if mode == "sync" else 1 / (1 - alpha)
    assert 0.3 < alpha < 0.55 and speedup < 0.95  # α̂'s long memory still holds some of the rejections above
    assert steps * (1 / speedup - 1) / policy.probe_spacing() <= PROBE_BUDGET + 1e-9
    policy._backoff = PROBE_BACKOFF  # as after fork probes that kept finding AR
    assert policy.probe_spacing() == policy._budget_spacing(fork=False)  # drafted probes keep the budget's spacing: α̂ needs them


def test_costs_are_saved_per_server_set_and_a_bad_file_starts_afresh(tmp_path):
    from lookahead_reasoning.runtime.cost_model import load_costs, save_costs

    path = tmp_path / "costs.json"
    model = CostModel()
    model.observe_target(1, 1.0, 20)
    model.observe_target(3, 2.0, 20)
    model.observe_draft(0.2, 1)
    save_costs("servers A", model, path)
    again = load_costs("servers A", path=path)
    assert again.estimate() == model.estimate() and again.ready
    assert load_costs("servers B", path=path).observations == 0
    path.write_text("{not json")
    assert load_costs("servers A", path=path).observations == 0
    save_costs("servers A", model, path)  # overwrites the unreadable file
    assert load_costs("servers A", path=path).ready
    # a state saved in another format (forgetting moments, no requests) is ignored: the model starts afresh
    path.write_text('{"servers A": {"1*y": [1.0, 0.05], "observations": 7}}')
    assert load_costs("servers A", path=path).observations == 0


def test_the_demo_says_what_it_measured_decided_and_projects(capsys):
    from rich.console import Console

    from lookahead_reasoning.runtime.display import describe_costs, print_cost_story
    from lookahead_reasoning.runtime.results import LookaheadResult, RunStats

    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    policy.measure_drafting = True  # the demo drafts once, for the report
    _learn(policy, float, rounds=40)  # a CPU: B(n) = n
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


def test_target_load_is_the_other_requests_in_flight_on_average():
    import time

    from lookahead_reasoning.runtime.depth import TargetLoad

    load = TargetLoad()
    mark = load.started(2)  # our fork of two branches
    other = load.started(1)  # another run's request, in flight for about half of our fork's time
    time.sleep(0.1)
    assert load.finished(1, other) == pytest.approx(2.0, abs=0.01)  # it saw our two all along
    time.sleep(0.1)
    # over its tokens: beside the other request it wrote at half speed, a third of its tokens (a time
    # average, 0.5, would overstate the load it saw)
    assert load.finished(2, mark) == pytest.approx(1 / 3, abs=0.05)
    assert load.in_flight == 0 and len(load._events) == 1  # nothing running: no history kept


def _shared_policy(runs):
    """A policy that learned from one run that branches are free, now shared by `runs` runs, with drafting's
    measured gain forgotten (what the servers cost is known, whether drafting pays among these runs not)."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    _learn(policy, lambda n: 1.0)
    policy.run_finished()
    policy._rates.clear(), policy._rounds_timed.clear()
    for _ in range(runs):
        policy.run_started()
    return policy


def test_runs_draft_one_at_a_time_until_the_rounds_say_drafting_pays():
    """16 runs share a policy whose model says drafting pays (free branches) before any drafting round was
    timed: one run drafts, the others write AR stretches (all 16 drafting deep at once would run a client out
    of CPU). Each drafting round measured at least as fast as AR rounds lets
    twice the runs draft at once, up to every run, and the runs left out meanwhile write a lone step and ask
    again; rounds that lose halve them."""
    policy = _shared_policy(16)
    with _runs_in_threads(policy, 16) as ask:
        plans = [ask(i) for i in range(16)]
        assert [p.depth > 0 for p in plans].count(True) == 1
        # nothing says yet that drafting pays: whole stretches, as AR would write (and one AR check)
        assert sum(bool(p.stretch_tokens) for p in plans) == 14
        for _ in range(2):
            policy.observe(_timed(0, T))
        slots = []
        for _ in range(6):
            policy.observe(_timed(3, T / 2))  # drafting advances twice as fast
            slots.append(policy.draft_slots)
            plans = [ask(i) for i in range(16)]  # every run's next round: the slots fill
            if policy.measured_gain() is not None and policy.draft_slots < 16:  # the rates say drafting pays:
                assert [p == RoundPlan(0) for p in plans].count(True) == 16 - policy.draft_slots  # lone steps
    assert slots == [1, 2, 4, 8, 16, 16]  # the first drafting round alone does not measure a gain yet
    for _ in range(40):
        policy.observe(_timed(3, 4 * T))  # the load changed: drafting rounds now lose
    estimate = policy.cost_estimate()
    assert estimate.draft_slots == 1 and estimate.planned_depth == 0


def test_rates_that_say_drafting_barely_pays_do_not_widen_the_slots():
    """Drafting rounds measured 4 % faster than AR rounds: the runs that draft go on drafting, but no more of
    them (GAIN_TO_WIDEN is 6 %): rates that barely favour drafting do not let every run draft."""
    policy = _shared_policy(16)
    with _runs_in_threads(policy, 16) as ask:
        [ask(i) for i in range(16)]
        for _ in range(2):
            policy.observe(_timed(0, T))
        for _ in range(6):
            policy.observe(_timed(3, T / 1.05))  # what a round keeps at α̂ counts 1 % under what it kept
            [ask(i) for i in range(16)]
        assert 1.03 < policy.measured_gain() < 1.06
        assert policy.draft_slots == 1 and policy.cost_estimate().planned_depth >= 3


def test_only_a_drafting_round_begun_with_every_slot_taken_widens_them_again():
    """Rounds that began among fewer drafting runs say little of more: 16 runs, drafting at twice AR's rate.
    Rounds of one run drafting widen the slots to 2, and no further until two runs draft at once."""
    policy = _shared_policy(16)
    with _runs_in_threads(policy, 16) as ask:
        assert [ask(i).depth > 0 for i in range(16)].count(True) == 1
        for _ in range(2):
            policy.observe(_timed(0, T))
        for _ in range(4):  # the one drafting run's rounds
            policy.observe(_timed(3, T / 2))
        assert policy.draft_slots == 2
        assert [ask(i).depth > 0 for i in range(16)].count(True) == 2
        policy.observe(_timed(3, T / 2))  # begun with both slots taken
        assert policy.draft_slots == 4


def test_a_run_that_ends_frees_its_drafting_slot():
    policy = _shared_policy(3)
    with _runs_in_threads(policy, 3) as ask:
        assert ask(0, finish=True).depth > 0  # drafts, then its run ends
        assert ask(1).depth > 0  # so the slot is free for another run
        assert ask(2).depth == 0  # ...whose round still drafts: a third run waits
        assert ask(1).depth > 0  # the drafting run's next round may draft again


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
    assert loss / policy.probe_spacing() <= PROBE_BUDGET
    assert (policy.costs.branch_cost(2) - 1) * PROBE_SHARE / PROBE_BUDGET < policy.probe_spacing() - 1


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
    base = policy._budget_spacing(fork=True)
    late = AR_STRETCH_STEPS + 2  # a probe comes at most a stretch (and the lone step before it) late
    # the cold start's probe, then one at the budget's spacing; each probe that left the plan at AR doubles
    # the spacing, up to PROBE_BACKOFF times the budget's
    assert base <= gaps[1] <= base + late
    assert all(later >= 1.5 * earlier for earlier, later in zip(gaps[1:3], gaps[2:4]))
    assert max(gaps) <= PROBE_BACKOFF * base + late and gaps[-1] >= PROBE_BACKOFF * base
    _learn(policy, lambda n: 1.0, rounds=200)  # the branches turned free: a probe sees it, and the plan drafts
    assert policy.cost_estimate().planned_depth >= 3
    assert policy.probe_spacing() == policy._budget_spacing(fork=False)  # back to the budget's spacing


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
    result = SyncEngine(config, models, FastPathVerifier(ScriptedJudge()), policy=policy).run("q")
    measuring = [r for r in result.round_log if r.measuring]
    assert len(measuring) == 1 and measuring[0].depth == 1 and measuring[0].branches == 1
    assert widths[measuring[0].index] == 1  # one target request: the step after the prefix, not after the draft
    assert measuring[0].accepted == 1 and [s.source for s in measuring[0].kept] == ["draft"]
    assert result.text == DELIM.join(target) and policy.costs.c() is not None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_pairs_the_exact_match_fast_path_accepted_do_not_time_the_judge(mode):
    """A pair the fast path accepted cost no judge call: a round of such pairs alone leaves j unknown (timing it would
    read j = 0 where the judge costs a large share of a step), and a round that mixes them
    times the judge by the pairs it answered. An exact-match verifier alone rejects as "exact" too: it is free."""
    same = JudgedDraft(draft="t", target="t", accept=True, score=1.0, method="exact")
    answered = JudgedDraft(draft="d", target="t", accept=False, score=0.1, method="llm-judge")
    unequal = JudgedDraft(draft="d", target="t", accept=False, score=0.0, method="exact")

    def judged_after(*rounds):
        policy = AdaptiveDepth(mode, initial=2, max_depth=8)
        for judged, judge_s in rounds:
            record = round_record(len(judged), 0, len(judged), branch_cost=free_branches, judge_s=judge_s)
            policy.observe(record.model_copy(update={"judged": judged}))
        return policy.costs.estimate().judge_s_per_round

    assert judged_after(([same], 1e-6)) is None
    assert judged_after(([same, same], 1e-6), ([same], 1e-6)) is None
    # sync: the fork of the one pair the fast path left took 0.2 s; async chain: judge_s is the mean over the
    # round's pairs (0.1 over two), so the one answered took 0.2 s
    assert judged_after(([same, answered], 0.2 if mode == "sync" else 0.1)) == pytest.approx(0.2)
    assert 0 < judged_after(([same, unequal], 1e-6)) < 1e-5


def test_the_plan_leans_toward_drafting_while_few_positions_are_judged():
    """Free branches, c = j = ¼. One draft accepted of three (α̂ 0.38): α̂ plans AR, one standard error up
    it drafts, so the plan drafts one step, which judges more positions; the same α̂ over 200 positions is
    known well enough: AR (so a few unlucky verdicts at the start do not hold every run at AR)."""
    def policy_with(accepted, rejected):
        costs = _fitted_costs()
        step = costs.estimate().step_tokens * T
        costs.observe_draft(0.25 * step, 1)
        costs.observe_judge(1, 0.25 * step)
        policy = AdaptiveDepth("sync", initial=2, max_depth=8, costs=costs)
        policy._tallies[1] = AcceptanceTally()
        policy._tallies[1].add(accepted, rejected, 1.0, 1.0)
        return policy.cost_estimate()

    few, many = policy_with(1.0, 2.0), policy_with(75.0, 125.0)
    assert few.alpha == pytest.approx(0.375) and many.alpha == pytest.approx(0.375, abs=0.002)
    assert few.planned_depth == 1 and many.planned_depth == 0


def test_one_accepted_draft_never_plans_deep_where_its_estimate_says_ar():
    """Branches at B(n) = 1 + 0.15(n − 1) (a CPU pair's fit that has drifted), c = 0.6, j = 0. After one
    accepted draft (α̂ 0.75 ± 0.31) α̂ says AR; one standard error up (α 0.999) the best round is deep, γ ≥ 6.
    The plan drafts one step to learn more, never the deep round."""
    costs = _fitted_costs(slope=0.15, loads=(0, 1, 2))
    step = costs.estimate().step_tokens * T
    costs.observe_draft(0.6 * step, 1)
    policy = AdaptiveDepth("sync", initial=2, max_depth=8, costs=costs)
    policy._tallies[1] = AcceptanceTally()
    policy._tallies[1].add(1.0, 0.0, 1.0, 1.0)
    assert policy._best_plan(optimistic=False)[0] == 0 and policy._best_plan(optimistic=True)[0] >= 6
    assert policy.cost_estimate().planned_depth == 1
    policy._tallies[1].add(40.0, 0.0, 1.0, 1.0)  # α̂ well known and high: the plan drafts as deep as pays
    assert policy.cost_estimate().planned_depth >= 6


def test_probes_owed_by_runs_that_ended_their_stretches_together_are_not_lost():
    """16 runs end stretches at about one time and one takes the probe: the count keeps what it held beyond
    the probe's spacing, up to one probe owed by each other run. A run alone starts the count again."""
    policy = _shared_policy(16)
    spacing = policy.probe_spacing()
    policy.ar_rounds = 3 * spacing
    policy._probe_taken(fork=False, spacing=spacing)
    assert policy.ar_rounds == 2 * spacing
    policy.ar_rounds = 100 * spacing
    policy._probe_taken(fork=False, spacing=spacing)
    assert policy.ar_rounds == 15 * spacing
    alone = _shared_policy(1)
    alone.ar_rounds = 3 * alone.probe_spacing()
    alone._probe_taken(fork=False, spacing=alone.probe_spacing())
    assert alone.ar_rounds == 0
