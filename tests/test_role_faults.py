"""A role that fails or stalls is a fault, not a measurement: the adaptive policy leaves the round out of
what it learns, plans AR while the role is down, retries now and then, and drafts again soon after the role
answers (runtime/adaptive/faults.py)."""

import threading
import time

import requests

from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.adaptive import faults as role_faults
from lookahead_reasoning.runtime.adaptive.adaptive import AdaptiveDepth
from lookahead_reasoning.runtime.reasoner import LookaheadReasoner
from lookahead_reasoning.runtime.results import JudgedDraft, RoundRecord, StepRecord


def _round(depth: int, wall_s: float, accepted: int = 0, faults: list[str] | None = None, index: int = 3) -> RoundRecord:
    kept = [StepRecord(text="step.\n\n", source="target", round=index)]
    judged = [JudgedDraft(draft="d", target="t", accept=i < accepted, score=None, method="llm-judge")
              for i in range(depth)]
    return RoundRecord(index=index, depth=depth, kind="drafting" if depth else "ar", judged=judged, accepted=accepted,
                       positions=min(depth, accepted + 1), kept=kept, finished=False, started=time.perf_counter(),
                       draft_s=0.1 * depth, target_s=1.0,
                       verify_s=wall_s - 1.0 if depth else 0.0, wall_s=wall_s, output_tokens=40 * (accepted + 1),
                       draft_steps=depth, faults=faults or [])


def test_a_round_whose_verifier_timed_out_teaches_the_policy_nothing():
    policy = AdaptiveDepth("sync", 2, 4)
    for _ in range(3):
        policy.observe(_round(0, 1.0))
        policy.observe(_round(2, 1.2, accepted=2))
    gain, alpha, draft_costs = policy.rates.gain(), policy.acceptance.alpha, policy.costs.state()["draft step"]
    policy.observe(_round(2, 14.0, faults=["verifier"]))  # a judge that stalled until its 13 s timeout
    assert policy.rates.gain() == gain
    assert policy.acceptance.alpha == alpha
    assert policy.costs.state()["draft step"] == draft_costs
    assert policy.faults.down == {"verifier"}


def test_while_a_role_is_down_one_answer_retries_and_a_round_that_answers_ends_the_outage(monkeypatch):
    monkeypatch.setattr(role_faults, "FAULT_RETRY_S", 0.2)
    policy = AdaptiveDepth("sync", 2, 4)
    policy.answer_started()
    policy.observe(_round(2, 14.0, faults=["draft"]))
    assert policy.next_round().depth == 0  # down: AR
    time.sleep(0.25)
    retry = policy.next_round()
    assert retry.depth >= 1  # the retry drafts...
    other = threading.Thread(target=lambda: plans.append(policy.next_round()))
    plans: list = []
    other.start(), other.join()
    assert plans[0].depth == 0  # ...and only one answer retries at a time
    policy.observe(_round(retry.depth, 1.2, accepted=1))
    assert not policy.faults.down and policy.faults.outages == 1


def test_after_a_judge_stall_the_shared_policy_drafts_again_within_30_s_of_recovery(sim_servers):
    """The judge stalls for 20 s under four concurrent answers that share one policy (as `lookahead serve`
    shares it); each judge call gives up after 3 s. Once the judge answers again, drafting rounds return
    within 30 s."""
    from test_free_branches import free_branch_servers

    with free_branch_servers(sim_servers) as sims:
        config = LookaheadConfig(depth=4, adaptive_depth=True, max_tokens=100_000, max_step_tokens=60,
                                 verifier="llm-judge", verifier_threshold=0.8, verifier_timeout_s=3.0)
        reasoner = LookaheadReasoner(sims.endpoints(), config)
        rounds: list[tuple[float, RoundRecord]] = []
        stop = threading.Event()

        def client(k: int) -> None:
            q = 0
            while not stop.is_set():
                reasoner.run(f"client {k} problem {q} " + "word " * 20,
                             on_round=lambda record: rounds.append((time.monotonic(), record)))
                q += 1

        def fault(mode: str) -> None:
            requests.post(f"{sims.judge.url}/sim/fault", json={"mode": mode}, timeout=5).raise_for_status()

        def drafted_since(moment: float) -> bool:
            return any(at > moment and r.depth and r.judged and not r.faults and r.started > 0 for at, r in rounds)

        clients = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(4)]
        for thread in clients:
            thread.start()
        try:
            warm = time.monotonic()
            while not drafted_since(warm + 3.0) and time.monotonic() < warm + 60:
                time.sleep(0.2)
            assert drafted_since(warm + 3.0), "the policy never drafted before the stall"
            fault("stall")
            time.sleep(20.0)
            fault("ok")
            healed = time.monotonic()
            while not drafted_since(healed) and time.monotonic() < healed + 30.0:
                time.sleep(0.2)
            resumed = time.monotonic() - healed
        finally:
            fault("ok")
            stop.set()
            for thread in clients:
                thread.join(timeout=60)
        assert any(r.faults for _, r in rounds), "the stall never reached a round"
        assert drafted_since(healed), "no drafting round within 30 s of the judge's recovery"
        assert resumed < 30.0
        assert reasoner.policy.faults.outages >= 1
        gain = reasoner.policy.rates.gain()
        assert gain is None or gain > 1.0  # no stalled round counted as slow drafting
