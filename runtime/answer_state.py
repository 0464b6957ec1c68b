"""One answer being written: its text, statistics and round log."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Literal

from lookahead_reasoning.runtime.answers import last_boxed
from lookahead_reasoning.runtime.branches import Branch
from lookahead_reasoning.runtime.results import CostEstimate
from lookahead_reasoning.runtime.results import LookaheadResult, RoundRecord, StepRecord, TraceSpan
from lookahead_reasoning.runtime.stats import RunMetrics

from lookahead_reasoning.errors import first_line


def server_s(times: list[float | None], combine: Callable[[list[float]], float]) -> float | None:
    """Requests' server times combined (max: a fork's longest; mean: a pipeline's steps); None unless every one
    is known."""
    return None if not times or None in times else combine(times)


class AnswerState:
    """The state of one answer being written: text so far, statistics, round log."""

    def __init__(self, prompt: str):
        self.prompt = prompt
        self.metrics = RunMetrics()
        self.finish: Literal["eos", "max_tokens"] = "eos"
        self.steps: list[StepRecord] = []
        self.log: list[RoundRecord] = []
        self.text = ""
        self.drafting = True
        self.pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="lookahead-answer")  # concurrent requests
        self.next_window: tuple[Future, str] | None = None  # async trees: the next window and the prefix it follows
        self.handed_on: Branch | None = None  # streamed rounds: the target's step after the kept text, running
        self.faults: list[str] = []  # roles that failed since the last round was recorded (RoundRecord.faults)

    def clock(self, moment: float) -> float:
        """A time.perf_counter() reading as seconds since the answer started (the trace's time axis)."""
        return moment - self.metrics.started

    def span(self, role: str, label: str, start: float, end: float, tokens: int = 0, fate: str = "") -> TraceSpan:
        return TraceSpan(role=role, label=label, start=self.clock(start), end=self.clock(end), tokens=tokens, fate=fate)

    def verify_span(self, start: float, end: float, pairs: int) -> TraceSpan:
        return self.span("verify", f"{pairs} pair{'s' * (pairs > 1)}", start, end, pairs)

    @property
    def prefix(self) -> str:
        return self.prompt + self.text

    def degrade(self, role: str, message: str, error: BaseException) -> None:
        self.drafting = False
        self.faults.append(role)
        self.metrics.degraded(f"{message}: {first_line(error)}")

    def draft_failed(self, error: BaseException) -> None:
        self.degrade("draft", "draft failed, continuing with target steps only", error)

    def result(self, cost_model: CostEstimate | None = None) -> LookaheadResult:
        text = self.text
        stats = self.metrics.finish(self.finish)
        stats.cost_model = cost_model
        return LookaheadResult(text=text, answer=last_boxed(text), steps=self.steps, round_log=self.log, stats=stats)
