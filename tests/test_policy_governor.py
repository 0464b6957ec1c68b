"""The drafting slots (runtime/adaptive/governor.py): how many concurrent answers may draft at once."""

import time

from lookahead_reasoning.runtime.adaptive.depth import RoundPlan
from lookahead_reasoning.runtime.adaptive.governor import DraftSlots
from scripted_rounds import T, answers_in_threads, shared_policy, timed


def test_answers_draft_one_at_a_time_until_the_rounds_say_drafting_pays():
    """16 answers share a policy whose model says drafting pays (free branches) before any drafting round was
    timed: one answer drafts, the others write AR stretches (all 16 drafting deep at once would run a client out
    of CPU). Each drafting round measured at least as fast as AR rounds lets
    twice the answers draft at once, up to every answer, and the answers left out meanwhile write a lone step and ask
    again; rounds that lose halve them."""
    policy = shared_policy(16)
    with answers_in_threads(policy, 16) as ask:
        plans = [ask(i) for i in range(16)]
        assert [p.depth > 0 for p in plans].count(True) == 1
        # nothing says yet that drafting pays: whole stretches, as AR would write (and one AR check)
        assert sum(bool(p.stretch_tokens) for p in plans) == 14
        for _ in range(2):
            policy.observe(timed(0, T))
        slots = []
        for _ in range(6):
            policy.observe(timed(3, T / 2))  # drafting advances twice as fast
            slots.append(policy.governor.slots)
            plans = [ask(i) for i in range(16)]  # every answer's next round: the slots fill
            if policy.rates.gain() is not None and policy.governor.slots < 16:  # the rates say drafting pays:
                assert [p == RoundPlan(0) for p in plans].count(True) == 16 - policy.governor.slots  # lone steps
    assert slots == [1, 2, 4, 8, 16, 16]  # the first drafting round alone does not measure a gain yet
    for _ in range(40):
        policy.observe(timed(3, 4 * T))  # the load changed: drafting rounds now lose
    estimate = policy.cost_estimate()
    assert estimate.draft_slots == 1 and estimate.planned_depth == 0


def test_rates_that_say_drafting_barely_pays_do_not_widen_the_slots():
    """Drafting rounds measured 4 % faster than AR rounds: the answers that draft go on drafting, but no more of
    them (GAIN_TO_WIDEN is 6 %): rates that barely favour drafting do not let every answer draft."""
    policy = shared_policy(16)
    with answers_in_threads(policy, 16) as ask:
        [ask(i) for i in range(16)]
        for _ in range(2):
            policy.observe(timed(0, T))
        for _ in range(6):
            policy.observe(timed(3, T / 1.05))  # what a round keeps at α̂ counts 1 % under what it kept
            [ask(i) for i in range(16)]
        assert 1.03 < policy.rates.gain() < 1.06
        assert policy.governor.slots == 1 and policy.cost_estimate().planned_depth >= 3


def test_only_a_drafting_round_begun_with_every_slot_taken_widens_them_again():
    """Rounds that began among fewer drafting answers say little of more: 16 answers, drafting at twice AR's rate.
    Rounds of one answer drafting widen the slots to 2, and no further until two answers draft at once."""
    policy = shared_policy(16)
    with answers_in_threads(policy, 16) as ask:
        assert [ask(i).depth > 0 for i in range(16)].count(True) == 1
        for _ in range(2):
            policy.observe(timed(0, T))
        for _ in range(4):  # the one drafting answer's rounds
            policy.observe(timed(3, T / 2))
        assert policy.governor.slots == 2
        assert [ask(i).depth > 0 for i in range(16)].count(True) == 2
        policy.observe(timed(3, T / 2))  # begun with both slots taken
        assert policy.governor.slots == 4


def test_an_answer_that_ends_frees_its_drafting_slot():
    policy = shared_policy(3)
    with answers_in_threads(policy, 3) as ask:
        assert ask(0, finish=True).depth > 0  # drafts, then its answer ends
        assert ask(1).depth > 0  # so the slot is free for another answer
        assert ask(2).depth == 0  # ...whose round still drafts: a third answer waits
        assert ask(1).depth > 0  # the drafting answer's next round may draft again


def test_a_drafting_plan_beyond_the_slots_is_not_admitted_and_an_answer_that_ends_frees_its_slot():
    slots = DraftSlots()
    for _ in range(3):
        slots.answer_started()
    assert slots.admit(1, drafts=True) and not slots.admit(2, drafts=True)
    assert slots.admit(2, drafts=False)  # an AR round needs no slot
    slots.answer_finished(1)
    assert slots.answers == 2 and slots.admit(2, drafts=True)


def test_the_slots_widen_on_a_round_begun_with_every_slot_taken_and_halve_on_a_loss():
    slots = DraftSlots()
    for _ in range(4):
        slots.answer_started()
    early = time.perf_counter()
    slots.drafting_round_timed(early, gain=2.0)  # begun before the one slot was taken
    assert slots.slots == 1
    slots.admit(1, drafts=True)
    slots.drafting_round_timed(time.perf_counter(), gain=2.0)
    assert slots.slots == 2
    slots.drafting_round_timed(early, gain=1.0)  # begun before that change: it changes nothing
    assert slots.slots == 2
    slots.drafting_round_timed(time.perf_counter(), gain=1.0)  # drafting gains under GAIN_TO_DRAFT: halved
    assert slots.slots == 1
    slots.drafting_round_timed(time.perf_counter(), gain=None)  # nothing measured: nothing changes
    assert slots.slots == 1
