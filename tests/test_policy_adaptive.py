"""The adaptive policy put together (runtime/adaptive/adaptive.py): what it reports to the cost model, the load it tracks."""

import pytest

from lookahead_reasoning.runtime.adaptive.depth import AdaptiveDepth
from lookahead_reasoning.runtime.results import JudgedDraft
from lookahead_reasoning.runtime.adaptive.theory import free_branches
from scripted_rounds import TOKENS, T, learn, round_record


def test_a_forks_branches_count_by_their_tokens():
    """A fork of 3 whose other two branches wrote half as many tokens as the longest: on a server where every
    request in flight adds its full cost (s = 1), one other request was in flight on average, not two."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    lone = round_record(0, 0, 0, branch_cost=float)
    policy.observe(lone)
    fork = lone.model_copy(update={"branches": 3, "target_s": TOKENS * T * 2, "target_tokens_all": TOKENS * 2})
    policy.observe(fork)
    assert policy.costs.estimate().branch_slope == pytest.approx(1.0)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_pairs_decided_without_a_model_do_not_time_the_judge(mode):
    """A pair the fast path accepted cost no judge call: a round of such pairs alone leaves j unknown (timing it would
    read j = 0 where the judge costs a large share of a step), and a round that mixes them
    times the judge by the pairs it answered. An exact-match verifier alone rejects as "exact" too: it is free."""
    same = JudgedDraft(draft="t", target="t", accept=True, score=1.0, method="exact")
    answered = JudgedDraft(draft="d", target="t", accept=False, score=0.1, method="llm-judge")
    unequal = JudgedDraft(draft="d", target="t", accept=False, score=0.0, method="exact")

    def judged_after(*rounds):
        policy = AdaptiveDepth(mode, initial=2, max_depth=8)
        for judged, verify_s in rounds:
            record = round_record(len(judged), 0, len(judged), branch_cost=free_branches, verify_s=verify_s)
            policy.observe(record.model_copy(update={"judged": judged}))
        return policy.costs.estimate().verify_s_per_round

    assert judged_after(([same], 1e-6)) is None
    assert judged_after(([same, same], 1e-6), ([same], 1e-6)) is None
    # sync: the fork of the one pair the fast path left took 0.2 s; async chain: verify_s is the mean over the
    # round's pairs (0.1 over two), so the one answered took 0.2 s
    assert judged_after(([same, answered], 0.2 if mode == "sync" else 0.1)) == pytest.approx(0.2)
    assert 0 < judged_after(([same, unequal], 1e-6)) < 1e-5
    # the numbers gate rejects before the judge is asked: its pairs are as free as the fast path's
    gated = JudgedDraft(draft="7", target="9", accept=False, score=None, method="numbers")
    assert judged_after(([gated, same], 1e-6)) is None
    assert judged_after(([gated, answered], 0.2 if mode == "sync" else 0.1)) == pytest.approx(0.2)


def test_a_streamed_round_times_the_judge_per_call():
    """A streamed round judges each pair as its branch ends: three calls of one pair in 0.3 s in all are a judge
    call of 0.1 s, not one call of three pairs that took 0.3 s."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    record = round_record(3, 3, 3, branch_cost=free_branches, verify_s=0.3)
    policy.observe(record.model_copy(update={"judge_calls": 3}))
    assert policy.costs.estimate().verify_s_per_round == pytest.approx(0.1)


def test_policy_backs_off_when_load_rises_and_drafts_again_when_it_falls():
    policy = AdaptiveDepth("sync", initial=2, max_depth=8, forget=0.8)
    free, linear = (lambda n: 1.0), float
    learn(policy, free)
    assert policy.next_round().depth >= 3
    learn(policy, linear, rounds=60)  # load: probes and forks now cost linear time
    assert policy.cost_estimate().planned_depth == 0
    learn(policy, free, rounds=400)  # load gone: the probes see it
    assert policy.cost_estimate().planned_depth >= 3


def test_target_load_is_the_other_requests_in_flight_on_average():
    import time

    from lookahead_reasoning.runtime.adaptive.depth import TargetLoad

    load = TargetLoad()
    mark = load.started(2)  # our fork of two branches
    other = load.started(1)  # another answer's request, in flight for about half of our fork's time
    time.sleep(0.1)
    assert load.finished(1, other) == pytest.approx(2.0, abs=0.01)  # it saw our two all along
    time.sleep(0.1)
    # over its tokens: beside the other request it wrote at half speed, a third of its tokens (a time
    # average, 0.5, would overstate the load it saw)
    assert load.finished(2, mark) == pytest.approx(1 / 3, abs=0.05)
    assert load.in_flight == 0 and load.events_kept == 1  # nothing running: no history kept
