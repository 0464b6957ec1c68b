"""Rounds that end at their decision (runtime/streamed_fork.py, runtime/branches.py): judged as branches end,
branches that can no longer be kept aborted, the bonus branch handed on to the next round still running."""

import random
import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st
from scripted import DELIM, ScriptedJudge, ScriptedModels

from lookahead_reasoning.programs.backend import RequestAborted
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.engine import AsyncEngine, SyncEngine
from lookahead_reasoning.verifiers import FastPathVerifier
from lookahead_reasoning.verifiers.registry import make_verifier

TARGET = ["s0 a", "s1 b", "s2 c", "s3 d", "s4 e", "s5 f \\boxed{5}"]
DRAFT = ["s0 a", "s1 b", "s2 c", "wrong x", "wrong y", "s5 f \\boxed{5}"]
ACCEPT = {"a", "b", "c", "d", "e", "f"}  # the scripted judge accepts a draft step holding one of these words
AR_TEXT = "".join(s + DELIM for s in TARGET[:-1]) + TARGET[-1]


class BatchOnly(ScriptedModels):
    """The same scripts with no way to send a branch alone: every fork is one batch."""

    target_branch = None
    abort_target = None


class HeldBranches(ScriptedModels):
    """Branches whose continuation `holds(continuation)` stay in flight until released or aborted (or 5 s pass,
    then the branch fails: a round that waits for one fails with it)."""

    def __init__(self, *args, holds=lambda continuation: "wrong" in continuation, **kwargs):
        super().__init__(*args, **kwargs)
        self.holds = holds
        self.events: dict[str, threading.Event] = {}
        self.held: list[str] = []  # continuations held, in order
        self.returned: list[str] = []
        self.lock = threading.Lock()

    def event(self, rid):
        with self.lock:
            return self.events.setdefault(rid, threading.Event())

    def release_all(self):
        with self.lock:
            for event in self.events.values():
                event.set()

    def target_branch(self, prefix, continuation, max_step_tokens, rid, on_progress=None):
        if self.holds(continuation):
            self.held.append(continuation)
            if on_progress is not None:
                on_progress("", 1)  # the server has started writing it
            if not self.event(rid).wait(timeout=5):
                raise TimeoutError("the round waited for a held branch")
            if rid in self.aborted:  # as SGLang ends an aborted request
                raise RequestAborted(f"aborted request {rid}", "partial", 1)
        step = super().target_branch(prefix, continuation, max_step_tokens, rid, on_progress)
        self.returned.append(continuation)
        return step

    def abort_target(self, rid):
        super().abort_target(rid)
        self.event(rid).set()
        return True


def sync_run(models, words=ACCEPT, depth=2, fork="streamed", on_round=None, verifier=None, **config):
    verifier = verifier or FastPathVerifier(ScriptedJudge(words))
    return SyncEngine(LookaheadConfig(depth=depth, fork=fork, **config), models, verifier, on_round=on_round).answer("q")


class HeldAfterRejection(HeldBranches):
    """The target's step after `after` (the step a "wrong" draft is judged against) ends only once a branch after
    that draft is in flight."""

    def __init__(self, *args, after="s2 c", **kwargs):
        super().__init__(*args, **kwargs)
        self.after = after

    def target_branch(self, prefix, continuation, max_step_tokens, rid, on_progress=None):
        if (prefix + continuation).endswith(self.after + DELIM):
            deadline = time.monotonic() + 5
            while not self.held and time.monotonic() < deadline:
                time.sleep(0.001)
        return super().target_branch(prefix, continuation, max_step_tokens, rid, on_progress)


def test_a_rejection_ends_the_round_without_waiting_for_the_branches_after_it():
    models = HeldAfterRejection(TARGET, DRAFT, after="s3 d")
    result = sync_run(models, depth=3)
    rejected = next(r for r in result.round_log if r.positions > r.accepted)
    # round 0 kept s0..s2 and its short bonus step s3 whole; round 1 drafted "wrong y", "s5 f …"
    assert [(s.text, s.source) for s in rejected.kept] == [("s4 e\n\n", "target")]
    assert [j.draft for j in rejected.judged] == ["wrong y\n\n"]  # what followed was never judged
    # every held branch that reached the server was aborted (one not yet started is cancelled before it is sent)
    assert models.held and all(rid in models.aborted for rid in models.events)
    assert not any("wrong" in c for c in models.returned)
    assert result.text == AR_TEXT
    fates = {span.fate for r in result.round_log for span in r.spans if span.role == "target"}
    assert "aborted" in fates


class BonusHeldUntilRecorded(ScriptedModels):
    """γ = 1, every draft accepted: round r's bonus branch (r steps in its prefix) streams its first word, then ends
    only after round r's record is out. A round that waited for its bonus would time out."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorded = []
        self.held = 0

    def target_branch(self, prefix, continuation, max_step_tokens, rid, on_progress=None):
        if continuation:
            self.held += 1
            [step] = self.target(prefix, [continuation], max_step_tokens, commit_prefix=False)
            if on_progress is not None and " " in step.text:
                on_progress(step.text.split(" ")[0] + " ", 1)
            deadline = time.monotonic() + 5
            while len(self.recorded) <= prefix.count(DELIM):
                if time.monotonic() > deadline:
                    raise TimeoutError("the round waited for its bonus branch")
                time.sleep(0.001)
        return super().target_branch(prefix, continuation, max_step_tokens, rid, on_progress)


def test_a_wholly_accepted_window_ends_at_its_decision_and_hands_its_bonus_branch_on():
    models = BonusHeldUntilRecorded(TARGET, TARGET)
    on_round = models.recorded.append
    result = sync_run(models, depth=1, on_round=on_round, handoff_tokens=1)
    assert result.text == AR_TEXT
    first = result.round_log[0]
    # the bonus step's first token is kept as target text; its rest is the next round's
    assert first.accepted == 1 and [(s.text, s.source) for s in first.kept] == [("s0 a" + DELIM, "draft"),
                                                                                 ("s1 ", "target")]
    assert [span.fate for span in first.spans if span.role == "target"] == ["judged", "handed on"]
    assert result.round_log[1].judged[0].target == TARGET[1] + DELIM  # round 1's t_0 is round 0's bonus step
    # each handed-on branch was sent once: as one round's bonus, then the next round's t_0
    handed_on = sum(1 for r in result.round_log for span in r.spans if span.fate == "handed on")
    assert handed_on == models.held == len(TARGET) - 1
    spans = sum(1 for r in result.round_log for span in r.spans if span.role == "target")
    assert len(models.branch_rids) == spans - handed_on
    assert models.aborted == []


def test_every_round_streams_even_the_first_and_t0_runs_while_the_draft_writes():
    models = ScriptedModels(TARGET, TARGET)
    result = sync_run(models, depth=2)
    assert models.calls["target"] == len(models.branch_rids)  # no batch: one request per branch
    assert models.calls["generate"] == 0 and models.commits == ["<prompt>"]  # the prompt, committed once
    assert result.text == AR_TEXT
    for record in result.round_log:
        t0 = next(span for span in record.spans if span.role == "target" and span.label == "t0")
        draft = [span for span in record.spans if span.role == "draft"]
        if draft and record.index == 0:
            assert t0.start <= draft[0].start + 0.05  # sent as the round began, not after drafting


def test_models_that_cannot_send_a_branch_alone_get_one_batched_fork_per_round():
    models = BatchOnly(TARGET, DRAFT)
    result = sync_run(models)
    assert models.branch_rids == [] and models.calls["target"] == len(result.round_log)
    assert [j.draft for j in result.round_log[1].judged] == ["wrong x\n\n", "wrong y\n\n"]  # every pair judged


def test_the_async_pipeline_aborts_the_branches_a_rejection_leaves_behind():
    models = HeldAfterRejection(TARGET, DRAFT)
    verifier = FastPathVerifier(ScriptedJudge(ACCEPT))
    result = AsyncEngine(LookaheadConfig(depth=2, engine="async"), models, verifier).answer("q")
    assert result.text == AR_TEXT
    assert models.held and all(rid in models.aborted for rid in models.events)


class Timed(ScriptedModels):
    """Branches take `delay` seconds per token (with jitter), so they end in any order, and stream their first
    words first, so a round may keep the start of a step that is still being written."""

    def __init__(self, *args, delay=0.0005, seed=0, **kwargs):
        super().__init__(*args, **kwargs)
        self.delay = delay
        self.random = random.Random(seed)
        self.lock = threading.Lock()

    def target_branch(self, prefix, continuation, max_step_tokens, rid, on_progress=None):
        step = super().target_branch(prefix, continuation, max_step_tokens, rid)
        with self.lock:
            share, jitter = self.random.random(), self.random.uniform(0.2, 2.0)
        words = step.text.split(" ")
        for written in range(1, len(words)):  # a chunk per word, the last (the step) excepted
            if on_progress is not None:
                on_progress(" ".join(words[:written]) + " ", written)
            time.sleep(self.delay * jitter * share)
        time.sleep(self.delay * step.completion_tokens * jitter)
        return step


words = st.sampled_from(["a", "b", "c", "x", "y", "\\boxed{1}"])
steps = st.lists(words, min_size=1, max_size=6).map(" ".join)
ROUNDS = {  # scripts, γ, the step cap and the seed of the branches' timing
    "target": st.lists(steps, min_size=1, max_size=7), "draft": st.lists(steps, min_size=0, max_size=7),
    "depth": st.integers(1, 4), "cap": st.integers(1, 6), "seed": st.integers(0, 1000),
}


@settings(max_examples=60, deadline=None)
@given(**ROUNDS, max_tokens=st.integers(1, 60), engine=st.sampled_from(["sync", "async"]), handoff=st.integers(1, 4))
def test_with_the_exact_verifier_the_answer_is_the_target_alone_token_for_token(
    target, draft, depth, cap, max_tokens, seed, engine, handoff,
):
    """Any step lengths, any order in which branches end, any token cap, any hand-off point: what is kept is what
    AR writes."""
    ar = ScriptedModels(target).generate("<prompt>", max_tokens)
    models = Timed(target, draft, seed=seed)
    config = LookaheadConfig(depth=depth, fork="streamed", engine=engine, max_step_tokens=cap, max_tokens=max_tokens,
                             verifier="exact", handoff_tokens=handoff)
    engine_class = AsyncEngine if engine == "async" else SyncEngine
    result = engine_class(config, models, make_verifier("exact")).answer("q")
    # AR stops inside the step that reaches the cap; a round keeps that step whole
    assert result.text.startswith(ar.text) or ar.text.startswith(result.text)
    if result.stats.finish == "eos" and ar.ending == "eos":
        assert result.text == ar.text and result.stats.output_tokens == ar.completion_tokens
    assert len(result.text) >= len(ar.text) or result.stats.finish == "eos"
    assert "".join(s.text for s in result.steps) == result.text


@settings(max_examples=60, deadline=None)
@given(**ROUNDS, accept=st.sets(st.sampled_from(["a", "b", "c", "x", "y"])), handoff=st.integers(1, 4))
def test_every_round_is_decided_by_its_verdicts_and_no_branch_outlives_it(target, draft, depth, cap, accept, seed,
                                                                          handoff):
    """Any verdicts: a round keeps its accepted prefix and then the target's own step (or hands the bonus on);
    every branch it sent was waited for, handed on, aborted or found already ended; and the answer does not
    depend on how fast the branches ran."""
    result = sync_run(Timed(target, draft, seed=seed), accept, depth, max_step_tokens=cap, max_tokens=120,
                      handoff_tokens=handoff)
    again = sync_run(Timed(target, draft, seed=seed + 1), accept, depth, max_step_tokens=cap, max_tokens=120,
                     handoff_tokens=handoff)
    assert again.text == result.text
    models = Timed(target, draft, seed=seed)
    result = sync_run(models, accept, depth, max_step_tokens=cap, max_tokens=120, handoff_tokens=handoff)
    assert "".join(s.text for s in result.steps) == result.text
    handed_on = 0
    for record in result.round_log:
        sources = [s.source for s in record.kept]
        assert sources == ["draft"] * record.accepted + ["target"] * (len(sources) - record.accepted)
        assert len(sources) - record.accepted <= 1
        fates = [span.fate for span in record.spans if span.role == "target"]
        assert set(fates) <= {"judged", "kept", "handed on", "aborted", "unused"}
        handed_on += fates.count("handed on")
        if "handed on" in fates:  # the window was accepted; the bonus step's start may be kept, never its end
            assert record.accepted == record.depth == record.positions
            assert len(record.kept) == record.accepted or not record.kept[-1].text.endswith(DELIM)
    assert handed_on <= len(result.round_log)
    # what a round hands on is the next round's t_0: it is judged or kept there, never sent again (an aborted
    # branch may have been cancelled before it was sent)
    spans = [span for r in result.round_log for span in r.spans if span.role == "target"]
    aborted = sum(1 for span in spans if span.fate == "aborted")
    assert len(spans) - handed_on - aborted <= len(models.branch_rids) <= len(spans) - handed_on


class CountedBranches(ScriptedModels):
    """The scripts, counting the branches sent alone (streamed) and the forks sent as one batch."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.alone = 0

    def target_branch(self, prefix, continuation, max_step_tokens, rid, on_progress=None):
        self.alone += 1
        return super().target_branch(prefix, continuation, max_step_tokens, rid, on_progress)

    @property
    def batched(self) -> int:
        return self.calls["target"] - self.alone  # a branch sent alone is a `target` call of its own


def test_rounds_fork_in_one_request_once_more_answers_share_the_policy_than_stream():
    from lookahead_reasoning.runtime.adaptive.depth import FixedDepth
    from lookahead_reasoning.runtime.adaptive.tuning import STREAMED_MAX_ANSWERS

    def run_beside(others):
        models, policy = CountedBranches(TARGET, DRAFT), FixedDepth(2)
        for _ in range(others):  # answers of other threads in flight on the same policy
            policy.answer_started()
        verifier = FastPathVerifier(ScriptedJudge(ACCEPT))
        result = SyncEngine(LookaheadConfig(depth=2, fork="streamed"), models, verifier, policy=policy).answer("q")
        assert result.text == AR_TEXT and policy.answers == max(1, others)  # its own answer has finished
        return models

    few, many = run_beside(STREAMED_MAX_ANSWERS - 1), run_beside(STREAMED_MAX_ANSWERS)
    assert few.alone > 0 and few.batched == 0  # with its own answer, STREAMED_MAX_ANSWERS in flight: streamed
    assert many.alone == 0 and many.batched > 0  # one more: every fork is one request
