"""The client's CPU meter, and the drafting slots it holds back when the client runs short of CPU."""

import time
from contextlib import contextmanager

import pytest

from lookahead_reasoning.runtime.adaptive.client_cpu import MIN_SPAN_S, WINDOW_S, ClientCpu
from lookahead_reasoning.runtime.adaptive.tuning import CLIENT_CORES_TO_NARROW, CLIENT_CORES_TO_WIDEN
from scripted_rounds import T, answers_in_threads, shared_policy, timed


class ScriptedClocks:
    """Wall and CPU clocks that the test moves: `advance(seconds, cores)` lets `seconds` pass at `cores` busy."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    def advance(self, seconds, cores):
        self.wall += seconds
        self.cpu += seconds * cores


def test_the_meter_reads_the_cpu_used_per_second_over_its_window():
    clocks = ScriptedClocks()
    meter = ClientCpu(cpu_clock=lambda: clocks.cpu, wall_clock=lambda: clocks.wall)
    meter.sample()
    assert meter.cores() is None  # one sample: nothing to read
    clocks.advance(MIN_SPAN_S / 2, 0.9)
    meter.sample()
    assert meter.cores() is None  # too short a span to say
    for _ in range(8):
        clocks.advance(0.1, 0.9)
        meter.sample()
    assert meter.cores() == pytest.approx(0.9)
    for _ in range(int(3 * WINDOW_S / 0.1)):  # the load falls: within a window the meter reads the new one
        clocks.advance(0.1, 0.2)
        meter.sample()
    assert meter.cores() == pytest.approx(0.2)


def test_the_meter_reads_a_busy_process_busy_and_an_idle_one_idle():
    """On the real clocks: a thread that spins reads what the OS says the process used (a core on an
    idle machine, less on a loaded one), one that sleeps reads almost none."""
    meter = ClientCpu()
    meter.sample()
    wall, cpu = time.perf_counter(), time.process_time()
    end = wall + 0.6
    while time.perf_counter() < end:
        sum(range(1000))
        meter.sample()
    used = (time.process_time() - cpu) / (time.perf_counter() - wall)
    assert used > 0.1, "the machine gave this test almost no CPU"
    assert meter.cores() == pytest.approx(used, abs=0.15)
    idle = ClientCpu()
    for _ in range(6):
        idle.sample()
        time.sleep(0.1)
    idle.sample()
    assert idle.cores() < 0.2


def _policy_with_meter(answers, cores):
    """A shared policy (scripted_rounds.shared_policy) whose client meter reads `cores["now"]` busy: each
    observed round lets 0.1 s pass at that load."""
    clocks = ScriptedClocks()
    policy = shared_policy(answers)
    policy.governor.client_cpu = ClientCpu(cpu_clock=lambda: clocks.cpu, wall_clock=lambda: clocks.wall)

    def observe(record):
        clocks.advance(0.1, cores["now"])
        policy.observe(record)

    return policy, observe


def _draft_rounds(policy, observe, ask, rounds):
    """`rounds` drafting rounds twice as fast as AR rounds, each followed by every answer's next plan; the slots
    after each."""
    seen = []
    for _ in range(rounds):
        observe(timed(3, T / 2))
        seen.append(policy.governor.slots)
        [ask(i) for i in range(16)]
    return seen


@pytest.mark.parametrize("cores, slots", [
    (0.1, [1, 2, 4, 8, 16, 16]),  # CPU to spare: the rates alone decide, as before
    ((CLIENT_CORES_TO_WIDEN + CLIENT_CORES_TO_NARROW) / 2, [1, 1, 1, 1, 1, 1]),  # busy: no wider
])
def test_a_busy_client_holds_the_drafting_slots_where_they_are(cores, slots):
    """16 answers, drafting rounds twice as fast as AR rounds: the slots double with each drafting round begun
    with every slot taken while the client has CPU to spare, and stay where they are once it is busy (a
    busy client slows every answer, while the drafting rounds still read faster than AR rounds)."""
    policy, observe = _policy_with_meter(16, {"now": cores})
    with answers_in_threads(policy, 16) as ask:
        [ask(i) for i in range(16)]
        for _ in range(2):
            observe(timed(0, T))
        assert _draft_rounds(policy, observe, ask, 6) == slots


@contextmanager
def _every_answer_drafting_on_a_client_out_of_cpu():
    """16 answers, every one drafting (the slots widened with CPU to spare), and then the client's meter reads
    0.95 of a core: yields (policy, observe, ask, load), where `load["now"]` sets the client's CPU."""
    load = {"now": 0.1}
    policy, observe = _policy_with_meter(16, load)
    with answers_in_threads(policy, 16) as ask:
        [ask(i) for i in range(16)]
        for _ in range(2):
            observe(timed(0, T))
        assert _draft_rounds(policy, observe, ask, 5)[-1] == 16
        load["now"] = 0.95
        for _ in range(int(WINDOW_S / 0.1)):  # the meter reads the new load within a window
            observe(timed(0, T))
        yield policy, observe, ask, load


def test_a_client_out_of_cpu_halves_the_drafting_slots_whatever_the_rates_say():
    """Every answer drafts, the rounds still read twice as fast as AR's, and the client runs out of CPU: each
    drafting round halves the slots, down to one; with CPU to spare again, they widen again."""
    with _every_answer_drafting_on_a_client_out_of_cpu() as (policy, observe, ask, load):
        assert _draft_rounds(policy, observe, ask, 5) == [8, 4, 2, 1, 1]
        load["now"] = 0.1
        for _ in range(int(WINDOW_S / 0.1)):
            observe(timed(0, T))
        assert _draft_rounds(policy, observe, ask, 2) == [2, 4]


def test_rounds_begun_before_the_slots_changed_do_not_change_them_again():
    """Every answer drafts and the client runs out of CPU: the rounds in flight end one after another, and the
    first halves the slots; the others began before that and leave them (were each to halve them, one busy
    reading would take 16 slots to 1 within 0.1 s). The next round begun after the change halves them again."""
    with _every_answer_drafting_on_a_client_out_of_cpu() as (policy, observe, ask, _):
        in_flight = [timed(3, T / 2) for _ in range(16)]  # begun before any of them ends
        for record in in_flight:
            observe(record)
        assert policy.governor.slots == 8
        observe(timed(3, T / 2))
        assert policy.governor.slots == 4


def test_policies_from_a_config_watch_the_client_and_scripted_ones_do_not():
    from lookahead_reasoning.runtime.config import LookaheadConfig
    from lookahead_reasoning.runtime.adaptive.depth import AdaptiveDepth, make_depth_policy

    policy = make_depth_policy(LookaheadConfig(adaptive_depth=True), "sync")
    assert isinstance(policy.governor.client_cpu, ClientCpu)
    assert AdaptiveDepth("sync", initial=2, max_depth=8).governor.client_cpu is None
