"""The online cost model on scripted timings: the fit, its bounds and rules, and what it saves."""

import random

import pytest

from lookahead_reasoning.runtime.adaptive.cost_model import CostModel

from lookahead_reasoning.runtime.adaptive.tuning import MAX_SLOPE


def test_estimates_from_scripted_timings():
    model = CostModel(forget=1.0)  # no forgetting: plain least squares, to check by hand
    per_token = lambda active: 0.05 * (1 + 0.7 * (active - 1))  # noqa: E731  t₁ = 0.05 s, s = 0.7
    model.observe_target(1, 20 * per_token(1), 20)  # a lone step
    model.observe_target(3, 20 * per_token(3), 20)  # a fork of 3
    model.observe_target(1, 20 * per_token(5), 20, others=4)  # a lone step while other answers had 4 in flight
    model.observe_draft(0.76, 2)  # two steps of 0.38 s (a target step: 1 s): c = 0.38
    model.observe_verifier(2, 0.5)
    assert model.branch_cost(1) == pytest.approx(1.0)
    assert model.branch_cost(3) == pytest.approx(1 + 0.7 * 2)  # one answer: B(n) = 1 + s(n - 1)
    assert model.branch_cost(3, concurrency=4) == pytest.approx((1 + 0.7 * 11) / (1 + 0.7 * 3))  # t(C·n) / t(C)
    assert model.c() == pytest.approx(0.38)
    # j(n) = judge seconds per round / one target step (20 tokens × 0.05 s = 1 s); a judge fork of 2 pairs cost B(2)
    assert model.judge_cost(4) == pytest.approx(0.5 / model.branch_cost(2) * model.branch_cost(4))
    # under 4 answers, in target steps at that load (AR's step there, which B(n) is relative to):
    # 1 + 0.7·3 times as long
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
    slow.observe_target(3, 1.5, 20)  # s = 0.25: cheap for one answer...
    assert slow.branch_cost(3) == pytest.approx(1.5)
    assert slow.branch_cost(3, concurrency=64) > 2.9  # ...but at 64 concurrent answers nearly linear


def test_estimates_forget_so_they_follow_a_change_in_load():
    model = CostModel(forget=0.8)
    model.observe_target(1, 1.0, 20)
    for _ in range(10):
        model.observe_target(3, 1.0, 20)  # idle: B(3) = 1
    assert model.branch_cost(3) == pytest.approx(1.0)
    for _ in range(15):
        model.observe_target(3, 3.0, 20)  # loaded: B(3) = 3
    assert model.branch_cost(3) > 2.8


def test_with_many_answers_sharing_the_model_forgetting_is_per_answer_round():
    """64 answers share the model: the memory spans a few rounds of each answer, so one request of each answer
    at a new cost moves the estimate by a few rounds' worth, not all the way (per observation, 0.8 would
    keep less than a round of each answer)."""
    shared, alone = CostModel(forget=0.8), CostModel(forget=0.8)
    for _ in range(64 * 5):
        shared.observe_target(1, 1.0, 20, answers=64)  # 0.05 s per token
        alone.observe_target(1, 1.0, 20)
    for _ in range(64):  # a burst: every answer's next request 8 % slower (within the fit's inliers: full weight)
        shared.observe_target(1, 1.08, 20, answers=64)
        alone.observe_target(1, 1.08, 20)
    assert alone.estimate().target_s_per_token == pytest.approx(0.054, rel=1e-3)  # swamped by the burst
    assert shared.estimate().target_s_per_token == pytest.approx(0.05 + 0.004 * 0.2 / (1 - 0.8**6), abs=1e-4)


def _sixteen_answers(model: CostModel, rng: random.Random, observations: int, per_token: float = 0.005,
                  slope: float = 0.0, noise: float = 0.02) -> None:
    """Requests of 16 answers, `per_token` seconds a token alone, times (1 + `slope` × the others in flight): one, two
    or eight steps beside 10 to 30 others (answers drafting and not), timed by the server to within `noise`, with 3 ms
    more in the client."""
    for _ in range(observations):
        tokens, others = rng.choice([17, 34, 136]), rng.uniform(10, 30)
        server = per_token * tokens * (1 + slope * others) * rng.uniform(1 - noise, 1 + noise)
        model.observe_target(1, server + 0.003, tokens, others, answers=16, server_seconds=server)


def test_a_stall_of_the_server_does_not_read_as_a_slope():
    """A moment's stall slows every request in flight, and more are in flight at a higher load (they pile up):
    16 answers drafting at slope 0, and requests beside 38 to 48 others take 2.5 times their time per token for a
    moment. At full weight the fit would price B(2) at 1.64 here."""
    model, rng = CostModel(), random.Random(0)
    _sixteen_answers(model, rng, 200)
    for others in (38, 40, 42, 44, 46, 48):
        model.observe_target(1, 0.216, 17, others, answers=16, server_seconds=0.213)
    assert model.branch_cost(2, 16) < 1.05


def test_a_change_that_lasts_is_followed_within_a_few_rounds_of_each_answer():
    """Outliers count against the typical residual, which each residual moves: a server that stays 2.5 times
    slower (other tenants' requests) is in the fit within eight rounds of each of 16 answers, about as an
    unweighted fit would be (11.1 ms a token against 11.3: the fit's own memory), and one whose branches stop
    being free (a slope of 1 from then on) within ten more."""
    model, rng = CostModel(), random.Random(0)
    _sixteen_answers(model, rng, 200)
    _sixteen_answers(model, rng, 16 * 8, per_token=0.0125)
    assert model.estimate(16).target_s_per_token > 0.010
    _sixteen_answers(model, rng, 16 * 10, per_token=0.0125, slope=1.0)
    assert model.branch_cost(2, 16) == pytest.approx(31 / 16, rel=0.05)


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
    """64 answers on a linear server (t₁ = 5 ms): every request beside 62 to 66 others, the client's noise in
    timing them larger than what the load's spread adds (as in `bench load`)."""
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


def _four_answers_always_in_flight(model, slope, noise):
    """Four answers that stay at AR on a server timing its own requests (t₁ = 5 ms, o = 5 ms): every request
    beside about 3 others, lone steps, 8-step stretches, and fork probes whose 4-token branch adds a quarter of
    a request beside a step; `noise`: each request's time off by up to this share, drawn independently."""
    draws = random.Random(3)
    rounds = [(16, 3.0), (136, 3.0), (16, 3.25), (136, 2.9), (16, 3.1), (119, 3.0)] * 4
    for tokens, others in rounds:
        server_s = (0.005 + tokens * 0.005 * (1 + slope * others)) * (1 + noise * draws.uniform(-1, 1))
        model.observe_target(1, server_s + 0.004, tokens, others=others, steps=max(1, tokens // 16),
                             answers=4, server_seconds=server_s)
    return model.estimate(4)


@pytest.mark.parametrize("slope, noise, low, high", [(0.0, 0.01, 0.0, 0.1), (1.0, 0.01, 0.8, 1.5), (0.0, 0.2, 0.8, 1.5)])
def test_steady_server_times_tell_the_slope_where_the_load_barely_varies(slope, noise, low, high):
    """Loads of 2.9 to 3.25 others vary too little for a client's timings, whose noise may line up with the
    load (the tests above). The server's own times are steady enough: their slope's standard error is small,
    and the fit stands; where they scatter (20 %), it cannot tell, and the slope reads linear, the safe side."""
    estimate = _four_answers_always_in_flight(CostModel(), slope, noise)
    assert low <= estimate.branch_slope <= high  # linear: 0.9 of a step that includes the client's 4 ms


def test_at_one_high_load_the_time_alone_comes_from_the_lighter_load_seen_before():
    model = CostModel()
    for others in (0, 1, 3, 0, 2, 4, 0, 1) * 2:  # lighter, varied load first: t₁ = 5 ms, linear
        model.observe_target(1, 16 * 0.005 * (1 + others), 16, others=others)
    _at_one_high_load(model, rounds=8)  # the fast fit has forgotten the light load; the slow one has not
    assert model.estimate(64).target_s_per_token < 0.01  # not the local fit's 0.32 s (u = 0)
    assert model.branch_cost(2, concurrency=64) == pytest.approx(2.0, abs=0.05)


def test_one_answers_stretches_long_after_a_probe_keep_the_probes_slope():
    """One answer while AR wins on a linear server: a probe, then many AR stretches alone with a little noise.
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


def test_no_data_means_no_change_and_missing_figures_are_harmless():
    model = CostModel()
    assert not model.ready and model.c() is None and model.branch_cost(4) == 1.0 and model.judge_cost(3) == 0.0
    model.observe_target(0, 1.0, 10)  # nothing to learn from: ignored
    model.observe_target(3, 0.0, 10)
    assert model.observations == 0


def test_costs_are_saved_per_server_set_and_a_bad_file_starts_afresh(tmp_path):
    from lookahead_reasoning.runtime.adaptive.cost_model import load_costs, save_costs

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


def test_requests_all_at_one_load_beside_others_leave_the_time_alone_unknown():
    """Every request beside exactly three others: nothing tells the time alone from what the others add."""
    model = CostModel()
    for tokens in (16, 32, 16, 48):
        model.observe_target(1, tokens * 0.02, tokens, others=3)
    assert model.estimate().target_s_per_token is None and not model.slope_known
