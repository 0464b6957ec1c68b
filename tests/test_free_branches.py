"""Free branches stay free: the cost model and the adaptive policy on servers shaped like a bfloat16 CPU
server (branches batch for free, a request has a fixed cost, steps vary in length), where the policy had
read B(2) = 2 and then never drafted."""

import random

import pytest

from lookahead_reasoning.eval.simserver import SimConfig
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.adaptive.cost_model import CostModel
from lookahead_reasoning.runtime.reasoner import LookaheadReasoner
from lookahead_reasoning.runtime.adaptive.theory import engine_speedup

OVERHEAD_S, PER_TOKEN_S = 0.45, 0.22  # a bf16 CPU server: a request's fixed cost, and its time per token


def _observe(model: CostModel, rng: random.Random, tokens: int, others: float = 0.0, steps: int = 1) -> None:
    """A target request on a server where branches are free (its time does not depend on `others`)."""
    seconds = (OVERHEAD_S + PER_TOKEN_S * tokens) * (1.0 + rng.gauss(0.0, 0.03))
    model.observe_target(1, seconds + 0.01, tokens, others, steps=steps, server_seconds=seconds)


@pytest.mark.parametrize("seed", range(4))
def test_a_probe_that_measured_free_branches_is_not_forgotten_behind_ar_stretches(seed):
    rng = random.Random(seed)
    model = CostModel()
    for _ in range(30):  # a history of AR stretches, all alone: nothing says what a branch costs
        _observe(model, rng, rng.randint(20, 320), steps=3)
    _observe(model, rng, 90)
    _observe(model, rng, 88, others=0.26)  # a fork probe: a quarter step beside the step, at no extra cost
    readings = []
    for _ in range(20):  # stretches after it: the probe fades from the fits, but what it measured stays
        _observe(model, rng, rng.randint(20, 320), steps=3)
        readings.append(model.branch_cost(2))
    assert max(readings) < 1.35  # one noisy probe; linear would read 2.0
    assert readings[-1] == pytest.approx(readings[7], abs=0.02)  # no jump once the probe has faded


def test_where_no_slope_was_ever_measured_branches_are_priced_linear():
    rng = random.Random(0)
    model = CostModel()
    for _ in range(40):
        _observe(model, rng, rng.randint(20, 320), steps=3)
    assert not model.slope_known  # every request alone: a probe must measure it first
    _observe(model, rng, 88, others=0.02)  # a load too slight to tell a slope from noise
    assert model.branch_cost(2) == pytest.approx(2.0, abs=0.01)  # the safe side until a probe measures it


SCALE = 1 / 40  # the simulated servers run 40 times faster than the CPU server they stand for


def _cpu_like(role: str, decode_s: float, **extra) -> SimConfig:
    """A server shaped like the bf16 CPU one: batch slope 0, a fixed cost per request, cheap cached prefill,
    steps of 15 to 50 tokens."""
    return SimConfig(role=role, decode_ms=decode_s * 1000 * SCALE, request_ms=OVERHEAD_S * 1000 * SCALE,
                     prefill_ms=0.02, batch_slope=0.0, step_tokens=15, step_tokens_max=50, steps=12, **extra)


def free_branch_servers(sim_servers):
    """Draft, target and judge shaped like bf16 CPU servers; the draft a tenth of the target's time per token,
    the judge accepting 90 % of the drafts."""
    return sim_servers(_cpu_like("draft", PER_TOKEN_S * 0.1), _cpu_like("target", PER_TOKEN_S),
                       _cpu_like("judge", PER_TOKEN_S * 0.1, alpha=0.9, seed=5))


def test_on_free_branches_the_policy_learns_b2_near_one_and_drafts_where_the_theory_says_it_pays(sim_servers):
    with free_branch_servers(sim_servers) as sims:
        config = LookaheadConfig(depth=4, adaptive_depth=True, max_tokens=100_000, max_step_tokens=60,
                                 verifier="llm-judge", verifier_threshold=0.8)
        reasoner = LookaheadReasoner(sims.endpoints(), config)
        logs = [reasoner.run(f"problem {q} " + "word " * 20).round_log for q in range(4)]
        estimate = reasoner.policy.cost_estimate()
        # the target's time per token as the servers run it: streamed drafting rounds, whose branches start at
        # different moments, must not read as a target that writes ten times faster behind a large fixed cost
        _, s_per_token, _ = reasoner.policy.costs.step_figures()
        assert s_per_token == pytest.approx(PER_TOKEN_S * SCALE, rel=0.25)
        assert estimate.branch_cost[2] == pytest.approx(1.0, abs=0.1)
        # a draft step costs its request's fixed cost and a tenth of the target's time per token
        assert estimate.c is not None and estimate.c < 0.3
        best = max(engine_speedup("sync", depth, 0.9, estimate.c, estimate.j or 0.0,
                                  branch_cost=reasoner.policy.costs.branch_cost) for depth in range(1, 9))
        assert best > 1.5  # the theory says drafting pays here...
        later = [record for log in logs[1:] for record in log]
        assert sum(record.depth >= 2 for record in later) >= len(later) / 2  # ...and the policy drafts deep


def test_a_draft_step_is_priced_by_its_time_whatever_its_length():
    """A draft request's fixed cost is most of a short step's time: a one-token step (the end of a step the
    token cap cut) costs about what a step does, not forty times as much per token."""
    rng = random.Random(0)
    model = CostModel()
    for tokens in (40, 60, 40, 60):
        _observe(model, rng, tokens)
    _observe(model, rng, 50, others=1.0)
    for lengths in ([30, 1, 45], [40, 35, 1], [1, 50, 30]):
        model.observe_draft(sum(OVERHEAD_S + 0.3 * PER_TOKEN_S * n for n in lengths), len(lengths))
    step = OVERHEAD_S + PER_TOKEN_S * 50
    assert model.c() == pytest.approx((OVERHEAD_S + 0.3 * PER_TOKEN_S * 25.8) / step, rel=0.15)


def test_a_fork_is_priced_by_its_longest_branch_where_steps_vary_in_length():
    rng = random.Random(2)
    model = CostModel()
    for tokens in (40, 60, 40, 60):
        _observe(model, rng, tokens)
    _observe(model, rng, 50, others=1.0)  # free branches
    model.observe_step_lengths([20, 80] * 10)
    assert model.branch_cost(2) == pytest.approx(1.0, abs=0.05)  # n branches of one length: free
    longest, mean = 20 * 0.25 + 80 * 0.75, 50  # two branches: both 20 tokens only a quarter of the time
    expected = (OVERHEAD_S + PER_TOKEN_S * longest) / (OVERHEAD_S + PER_TOKEN_S * mean)
    assert model.branch_cost(2, longest=True) == pytest.approx(expected, rel=0.05)
    assert model.estimate().fork_cost[2] == pytest.approx(expected, rel=0.05)
    model.observe_step_lengths([50] * 64)  # steps of one length: the fork costs what its branches do
    assert model.branch_cost(2, longest=True) == pytest.approx(model.branch_cost(2))


def test_the_first_fork_probe_measures_free_branches_where_steps_vary_in_length():
    """The probe's extra branch is the step once more: beside a 68-token step after a 27-token lone step, a
    quarter-step branch (7 tokens) is too slight a load to fit the slope from, and the model stays linear."""
    from lookahead_reasoning.runtime.adaptive.probes import probe_tokens

    def after_probe(extra_tokens: int) -> float:
        rng = random.Random(3)
        model = CostModel()
        _observe(model, rng, 27)  # the lone step before the probe
        _observe(model, rng, 68, others=min(extra_tokens, 68) / 68)  # the probe: free, whatever its extra branch
        return model.branch_cost(2)

    assert after_probe(probe_tokens(27)) == pytest.approx(1.0, abs=0.1)
    assert after_probe(7) == pytest.approx(2.0, abs=0.01)
