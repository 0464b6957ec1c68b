"""The sync engine's streamed fork (runtime/streamed_fork.py): judged as branches finish, wasted ones aborted."""

import threading

from hypothesis import given, settings
from hypothesis import strategies as st
from scripted import ScriptedJudge, ScriptedModels

from lookahead_reasoning.programs.backend import BackendError
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.engine import SyncEngine
from lookahead_reasoning.verifiers import FastPathVerifier

TARGET = ["s0 a", "s1 b", "s2 c", "s3 d", "s4 e", "s5 f \\boxed{5}"]
DRAFT = ["s0 a", "s1 b", "s2 c", "wrong x", "wrong y", "s5 f \\boxed{5}"]
ACCEPT = {"a", "b", "c", "d", "e", "f"}  # the scripted judge accepts a draft step holding one of these words


class BatchOnly(ScriptedModels):
    """The same scripts with no way to send a branch alone: every fork is one batch."""

    target_branch = None
    abort_target = None


class HeldBranches(ScriptedModels):
    """Branches after a draft step holding "wrong" stay in flight until aborted (or 30 s pass)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.released: dict[str, threading.Event] = {}
        self.returned: list[str] = []

    def target_branch(self, prefix, continuation, max_step_tokens, rid):
        if "wrong" in continuation:
            event = self.released.setdefault(rid, threading.Event())
            if not event.wait(timeout=30):
                raise TimeoutError("the round waited for a branch it could never keep")
            if rid in self.aborted:  # as SGLang ends an aborted request: an error, not a step
                raise BackendError(f"aborted request {rid}")
        step = super().target_branch(prefix, continuation, max_step_tokens, rid)
        self.returned.append(continuation)
        return step

    def abort_target(self, rid):
        super().abort_target(rid)
        self.released.setdefault(rid, threading.Event()).set()
        return True


def sync_run(models, words=ACCEPT, depth=2, fork="streamed", **config):
    verifier = FastPathVerifier(ScriptedJudge(words))
    return SyncEngine(LookaheadConfig(depth=depth, fork=fork, **config), models, verifier).answer("q")


def test_a_rejection_ends_the_round_without_waiting_for_the_branches_after_it():
    models = HeldBranches(TARGET, DRAFT)
    result = sync_run(models)
    second = result.round_log[1]
    assert [s.text for s in second.kept] == ["s3 d\n\n"]  # d_1 "wrong x" rejected: the target's own step
    assert [j.draft for j in second.judged] == ["wrong x\n\n"]  # d_2 was never judged: its fate was known
    # every held branch that reached the server was aborted (one not yet started is cancelled before it is sent)
    assert models.released and set(models.released) <= set(models.aborted)
    assert not any("wrong" in c for c in models.returned)
    assert result.text == "".join(s + "\n\n" for s in TARGET[:-1]) + TARGET[-1]


def test_the_first_round_is_one_batch_that_commits_the_prompt_and_later_rounds_stream():
    models = ScriptedModels(TARGET, TARGET)
    result = sync_run(models)
    assert len(result.round_log) == 2
    assert models.calls["target"] == 1 + len(models.branch_rids)  # one batch, then one request per branch
    assert len(models.branch_rids) == result.round_log[1].branches == 3


def test_a_fully_accepted_window_waits_for_its_bonus_branch_and_aborts_nothing():
    models = ScriptedModels(TARGET, TARGET)
    result = sync_run(models, depth=2)
    assert all(r.accepted == r.depth for r in result.round_log if r.depth)
    assert models.aborted == []
    assert result.round_log[1].kept[-1].source == "target"


def test_models_that_cannot_send_a_branch_alone_get_one_batched_fork_per_round():
    models = BatchOnly(TARGET, DRAFT)
    result = sync_run(models)
    assert models.branch_rids == [] and models.calls["target"] == len(result.round_log)
    assert [j.draft for j in result.round_log[1].judged] == ["wrong x\n\n", "wrong y\n\n"]  # every pair judged


words = st.sampled_from(["a", "b", "c", "x", "y", "\\boxed{1}"])
steps = st.lists(words, min_size=1, max_size=4).map(" ".join)


@settings(max_examples=80, deadline=None)
@given(
    target=st.lists(steps, min_size=1, max_size=7),
    draft=st.lists(steps, min_size=0, max_size=7),
    depth=st.integers(1, 4),
    cap=st.integers(1, 5),
    accept=st.sets(st.sampled_from(["a", "b", "c", "x", "y"])),
)
def test_streaming_keeps_what_one_batched_fork_keeps(target, draft, depth, cap, accept):
    """Same scripts, same judge: the kept steps, their sources, and the judged pairs: those that decided the walk,
    perhaps followed by pairs whose branches arrived in the same wave, as the batch judges them."""
    streamed = sync_run(ScriptedModels(target, draft), accept, depth, max_step_tokens=cap, max_tokens=10_000)
    batched = sync_run(ScriptedModels(target, draft), accept, depth, max_step_tokens=cap, max_tokens=10_000,
                       fork="batched")
    assert streamed.text == batched.text
    assert [(s.text, s.source) for s in streamed.steps] == [(s.text, s.source) for s in batched.steps]
    for s, b in zip(streamed.round_log, batched.round_log, strict=True):
        assert s.positions <= len(s.judged) <= len(b.judged)
        same = b.judged[: len(s.judged)]
        assert [(j.draft, j.target, j.accept) for j in s.judged] == [(j.draft, j.target, j.accept) for j in same]
