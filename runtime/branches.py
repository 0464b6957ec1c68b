"""Target branches in flight: streamed requests that a round decides on as they arrive.

A branch is the target's step after `prefix + continuation`, sent as a streamed request with
its own SGLang request id. The engine can wait for it, abort it (`/abort_request`) when its
step can no longer be kept, or hand it to the next round: a branch after the text a round
keeps is exactly the step the target alone would write next, so it goes on running as the
next round's first branch (t_0) instead of being sent again.

Each branch notes when it started and ended, how many tokens it wrote and what became of
it, for the round's trace (results.TraceSpan).
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from lookahead_reasoning.programs.step_types import StepOutput


def supports_streaming(models) -> bool:
    """Whether the models can send one target branch with a request id, and abort it."""
    return callable(getattr(models, "target_branch", None)) and callable(getattr(models, "abort_target", None))


@dataclass(eq=False)
class Branch:
    """One target branch in flight (see the module's docstring)."""

    models: object
    prefix: str  # the round's prefix
    continuation: str  # draft text after it that the branch continues
    rid: str
    started: float  # time.perf_counter() when it was sent
    future: Future | None = None  # set where a pool runs it (start_branch)
    tokens: int = 0  # completion tokens written so far (as streamed)
    ended: float | None = None
    fate: str = "running"  # kept, judged, handed on, aborted, unused
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def after(self) -> str:
        """The text the branch's step follows."""
        return self.prefix + self.continuation

    def done(self) -> bool:
        return self.ended is not None or (self.future is not None and self.future.done())

    def result(self) -> StepOutput:
        assert self.future is not None, "a branch run in its caller's thread has no result to wait for"
        return self.future.result()

    def abort(self) -> None:
        """Stop the branch: cancelled before it was sent, else aborted on the server; its step is never used."""
        with self._lock:
            if self.ended is not None or self.fate == "aborted":
                return
            self.fate = "aborted"
        if self.future is not None and self.future.cancel():
            return
        self.models.abort_target(self.rid)

    def _progress(self, tokens: int) -> None:
        first = self.tokens == 0
        self.tokens = max(self.tokens, tokens)
        if first and self.fate == "aborted":  # the abort may have reached the server before the request did
            self.models.abort_target(self.rid)

    def run(self, cap: int) -> StepOutput:
        """Send the request and wait for its step (at most `cap` tokens), in the calling thread."""
        if self.fate == "aborted":
            raise CancelledError()
        try:
            step = self.models.target_branch(self.prefix, self.continuation, cap, self.rid, self._progress)
        finally:
            self.ended = time.perf_counter()
        self.tokens = step.completion_tokens
        return step


def new_branch(models, prefix: str, continuation: str) -> Branch:
    """A branch not sent yet: `run` sends it in the calling thread."""
    return Branch(models, prefix, continuation, f"lookahead-{uuid.uuid4().hex}", time.perf_counter())


def start_branch(models, pool: ThreadPoolExecutor, prefix: str, continuation: str, cap: int) -> Branch:
    """Send the target's step after `prefix + continuation` (at most `cap` tokens) as a branch of its own."""
    branch = new_branch(models, prefix, continuation)
    branch.future = pool.submit(branch.run, cap)
    return branch


def outcome(branch: Branch) -> StepOutput | None:
    """The branch's step, or None where it was aborted or cancelled before it ended."""
    try:
        return branch.result()
    except CancelledError:
        return None
    except Exception:
        if branch.fate == "aborted":
            return None
        raise
