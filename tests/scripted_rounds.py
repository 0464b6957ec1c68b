"""Scripted rounds for the adaptive policy's tests: records of rounds on servers of a given B(n), and answers
in threads."""

import queue
import threading
import time
from contextlib import contextmanager

from lookahead_reasoning.runtime.adaptive.cost_model import CostModel
from lookahead_reasoning.runtime.adaptive.depth import AdaptiveDepth
from lookahead_reasoning.runtime.adaptive.rates import MeasuredRates
from lookahead_reasoning.runtime.results import JudgedDraft, RoundRecord, StepRecord
from lookahead_reasoning.runtime.adaptive.theory import tree_branches

TOKENS = 20  # tokens per step
T = 0.05  # seconds per target token alone


def round_record(depth, accepted, positions, *, branch_cost, c=0.1, verify_s=0.0, probe=0, stretch=0, width=1):
    """A sync round of γ = depth on servers where a fork of n branches costs branch_cost(n) steps
    (`probe`: the tokens of a fork probe's short second branch beside an AR round's step; `stretch`:
    the tokens of an AR round that wrote several steps in one request); never an answer's first round, which
    is not timed."""
    branches = tree_branches(depth, width) if depth else 1
    tokens = stretch or TOKENS
    judged = [JudgedDraft(draft="d", target="t", accept=True, score=1.0, method="judge")] * positions
    share = min(probe, TOKENS) / TOKENS  # of the step, the probe's branch ran beside it for this share
    target_s = tokens * T * (branch_cost(branches) + (branch_cost(2) - 1) * share)
    kind = "drafting" if depth else "probe" if probe else "stretch" if stretch else "ar"
    kept = [StepRecord(text="s", source="target", round=1)] * (tokens // TOKENS) if stretch else []
    return RoundRecord(
        index=1, depth=depth, kind=kind, judged=judged if depth else [], accepted=accepted, positions=positions,
        kept=kept, finished=False, started=0.0, draft_s=depth * TOKENS * T * c, target_s=target_s,
        verify_s=verify_s if depth else 0.0, wall_s=1.0, branches=branches, target_tokens=tokens,
        draft_tokens=depth * TOKENS, draft_steps=depth, width=width,
        target_tokens_all=tokens * branches + min(probe, TOKENS),
    )


def learn(policy, branch_cost, accept_all=True, rounds=30):
    """`rounds` rounds as the policy plans them on servers of `branch_cost`, every draft accepted (or, not
    `accept_all`, the first rejected); how many of them drafted."""
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


def fitted_costs(overhead=0.0, slope=0.0, loads=(0, 1)):
    """A cost model fitted to a server that batches for free (`slope` 0; else each other request in flight adds
    that share to a token's time): requests of 10–80 tokens, each paying `overhead` seconds, beside each of
    `loads` others."""
    costs = CostModel(forget=1.0)
    for tokens in (10, 20, 40, 80) * 3:
        for others in loads:
            costs.observe_target(1, overhead + tokens * T * (1 + slope * others), tokens, others=others)
    return costs


def timed(depth, seconds_per_token, stretch=0):
    """A round of γ = depth on free branches, every draft accepted (or an AR stretch of `stretch` tokens), that
    wrote its tokens at `seconds_per_token` (what the measured rates of drafting and AR rounds see)."""
    tokens = stretch or TOKENS * (depth + 1)
    kept = [StepRecord(text="s", source="draft", round=1)] * (tokens // TOKENS)
    return round_record(depth, depth, depth, branch_cost=lambda n: 1.0, stretch=stretch).model_copy(
        update={"output_tokens": tokens, "wall_s": tokens * seconds_per_token, "kept": kept,
                "started": time.perf_counter()})


@contextmanager
def answers_in_threads(policy, answers):
    """`answers` threads that stay alive (as the answers of `lookahead serve` do, so that each keeps its
    identity); yields ask(i, finish=False, first=False): the next round's plan of answer i (`first`: its first
    round), asked for from its thread; `finish`: that answer then ends."""
    requests = [queue.Queue() for _ in range(answers)]
    replies = queue.Queue()

    def run(i):
        while (asked := requests[i].get()) is not None:
            first, finish = asked
            replies.put(policy.next_round(first=first))
            if finish:
                policy.answer_finished()

    def ask(i, finish=False, first=False):
        requests[i].put((first, finish))
        return replies.get(timeout=10)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(answers)]
    for thread in threads:
        thread.start()
    try:
        yield ask
    finally:
        for i, thread in enumerate(threads):
            requests[i].put(None)
            thread.join()


def shared_policy(answers):
    """A policy that learned from one answer that branches are free, now shared by `answers` answers, with drafting's
    measured gain forgotten (what the servers cost is known, whether drafting pays among these answers not)."""
    policy = AdaptiveDepth("sync", initial=2, max_depth=8)
    learn(policy, lambda n: 1.0)
    policy.answer_finished()
    policy.rates = MeasuredRates()
    for _ in range(answers):
        policy.answer_started()
    return policy
