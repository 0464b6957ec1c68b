"""Target branches in flight: streamed requests that a round decides on as they arrive.

A branch is the target's step after `prefix + continuation`, sent as a streamed request with
its own SGLang request id. The engine can wait for it, abort it (`/abort_request`) when its
step can no longer be kept, or hand it to the next round: a branch after the text a round
keeps is exactly the step the target alone would write next. The round keeps the start of
that step (`cut`: target text, what AR would write) and the branch goes on running as the
next round's first branch (t_0), whose step is then the rest (`rest`).

Where the step is cut does not depend on timing: at its first `handoff` tokens (the text
the stream showed at exactly that count), so a run's answer is the same however fast the
servers were. A step of at most `handoff` tokens is kept whole.

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
    text: str = ""  # the text written so far (as streamed)
    handoff: int | None = None  # the token count at which a round may cut its step (`cut`)
    mark: tuple[str, int] | None = None  # the text streamed at exactly `handoff` tokens
    reached: threading.Event = field(default_factory=threading.Event)  # `handoff` tokens written, or ended
    consumed: StepOutput | None = None  # the start of its step that a round already kept (`cut`)
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

    def cut(self, delimiter: str) -> StepOutput | None:
        """The start of the branch's step that a round keeps now, once `handoff` tokens are written (`reached`):
        the text streamed at exactly that count, less any tail that could begin the delimiter (the step's end is
        the next round's to judge) or an unfinished character. None where the step is kept whole: it ended
        within `handoff` tokens, or the stream never showed that count."""
        if self.mark is None:
            return None
        text, tokens = self.mark
        streamed = text
        text = text.rstrip("\ufffd")
        for size in range(min(len(delimiter) - 1, len(text)), 0, -1):
            if delimiter.startswith(text[-size:]):
                text = text[:-size]
                break
        if delimiter in text:  # the step ended here: keep none of it, the next round judges it whole
            text = ""
        kept_tokens = tokens if text == streamed else max(0, tokens - 1)  # a trimmed tail: about one token
        if kept_tokens < 1 or not text:
            return None
        self.consumed = StepOutput(text, "length", completion_tokens=kept_tokens)
        return self.consumed

    def rest(self, step: StepOutput) -> StepOutput:
        """The branch's step less the piece a round already kept (`cut`)."""
        if self.consumed is None or not self.consumed.text:
            return step
        if not step.text.startswith(self.consumed.text):
            raise RuntimeError(f"target branch {self.rid}: its step does not start with the text it streamed")
        return StepOutput(step.text[len(self.consumed.text):], step.ending, step.prompt_tokens,
                          max(0, step.completion_tokens - self.consumed.completion_tokens), step.cached_tokens,
                          step.server_s)

    def _progress(self, text: str, tokens: int) -> None:
        first = self.tokens == 0
        with self._lock:
            if tokens >= self.tokens:
                self.tokens, self.text = tokens, text
            if self.handoff is not None and tokens >= self.handoff:
                if tokens == self.handoff and self.mark is None:
                    self.mark = (text, tokens)
                self.reached.set()
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
            self.reached.set()
        self.tokens = step.completion_tokens
        return step


def new_branch(models, prefix: str, continuation: str, handoff: int | None = None) -> Branch:
    """A branch not sent yet: `run` sends it in the calling thread."""
    return Branch(models, prefix, continuation, f"lookahead-{uuid.uuid4().hex}", time.perf_counter(), handoff=handoff)


def start_branch(models, pool: ThreadPoolExecutor, prefix: str, continuation: str, cap: int,
                 handoff: int | None = None) -> Branch:
    """Send the target's step after `prefix + continuation` (at most `cap` tokens) as a branch of its own."""
    branch = new_branch(models, prefix, continuation, handoff)
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
