"""Result records of a lookahead run and of the AR baseline."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class CostEstimate(BaseModel):
    """What the adaptive policy's cost model (runtime/adaptive/cost_model.py) estimates (`stats.cost_model`); None where
    it has no data yet."""

    target_s_per_token: float | None = None
    request_overhead_s: float | None = None  # o: a target request's fixed seconds, the client's share included
    branch_cost: dict[int, float] = {}  # B(n) for a few widths n, at `concurrency`
    fork_cost: dict[int, float] = {}  # the same with the fork's longest branch: what a round's fork costs
    branch_slope: float | None = None  # s: a mean step's extra time per extra concurrent request, over its time alone
    concurrency: float = 1.0  # answers sharing the servers when the estimate was made
    c: float | None = None  # the draft's time per step over the target's, at `concurrency`
    # the verifier's seconds for one pair (a fork of n pairs costs B(n) times this)
    verify_s_per_round: float | None = None
    j: float | None = None  # the same in target steps, at `concurrency`
    step_tokens: float | None = None
    observations: int = 0
    alpha: float | None = None  # the policy's acceptance estimate
    planned_depth: int | None = None  # the γ it would choose now (0: plain AR)
    planned_width: int | None = None  # the W it would choose now
    width_speedups: dict[int, float] = {}  # with --width W > 1: the best expected speedup at each width
    # over AR, by the theory with these costs at the plan's α (adaptive/planner.py)
    expected_speedup: float | None = None
    measured_gain: float | None = None  # tokens/s of the rounds that drafted over that of AR rounds, measured
    draft_slots: int | None = None  # how many of the answers sharing the policy may be in a drafting round at once
    # the CPU the client process used over the last second, in cores (client_cpu.py)
    client_cores: float | None = None


class StepRecord(BaseModel):
    text: str
    source: Literal["draft", "target"]
    verifier_score: float | None = None  # the verifier's score for an accepted draft step
    round: int


class JudgedDraft(BaseModel):
    draft: str
    target: str
    accept: bool
    score: float | None
    method: str


class TraceSpan(BaseModel):
    """One request of a round on the run's timeline, for `lookahead trace` (seconds since the answer started)."""

    role: Literal["draft", "target", "verify"]
    label: str  # d1..dm for the draft's steps, t0..tm for target branches, the judged positions for verify
    start: float
    end: float
    tokens: int = 0  # completion tokens written (for an aborted branch: by the time it was stopped)
    fate: str = ""  # target branches: kept, judged, handed on, aborted, unused


# What a round was for. "ar": one target step; "stretch": several target steps in one request, as the target
# alone writes them (adaptive/stretches.py); "probe": a target step with a fork probe's short second branch
# beside it, which prices a second branch (adaptive/probes.py); "measuring": one drafted step whose target writes
# only its own step, which prices the draft and the verifier (adaptive/planner.py); "drafting": a round that
# drafted γ steps and forked the target after them. Only "drafting" rounds say how fast lookahead advances.
RoundKind = Literal["ar", "stretch", "probe", "measuring", "drafting"]


class RoundRecord(BaseModel):
    index: int
    depth: int  # γ asked of the draft this round (0: no drafting)
    judged: list[JudgedDraft]
    accepted: int  # length of the accepted draft prefix
    positions: int  # draft positions decided: the accepted ones, plus the rejection that ended the walk
    kept: list[StepRecord]
    finished: bool  # the last kept step ended on EOS
    started: float  # time.perf_counter() at the start of the round
    draft_s: float  # time spent drafting this round's window (overlapped with the previous round when async)
    target_s: float
    # the same as the target server timed it (the longest of its requests, SGLang's e2e_latency; None where a
    # server did not say, and for streamed rounds, whose branches overlap the drafting): without the client's
    # own time, which grows with the answers that share its CPU
    target_server_s: float | None = None
    verify_s: float  # the verifier's time
    judge_calls: int = 1  # verifier calls behind verify_s: a streamed round judges pairs as their branches end
    wall_s: float
    branches: int = 0  # target requests of the round (the fork's width)
    kind: RoundKind
    width: int = 1  # draft candidates per position (W)
    target_tokens: int = 0  # completion tokens of the round's longest target branch
    target_tokens_all: int = 0  # completion tokens of all its target branches (a fork probe's included)
    output_tokens: int = 0  # tokens of the steps it kept
    target_others: float | None = None  # other answers' target requests in flight, on average, during its fork
    draft_tokens: int = 0  # completion tokens drafted for this round (one candidate per level for trees)
    draft_steps: int = 0  # draft requests one after another (a tree's levels)
    branch_tokens: list[int] = []  # tokens each target branch wrote: a sample of the target's step lengths
    # accepted positions from the round's start that were each level's first candidate (all, for a chain): the
    # path the async tree engine drafts the next window from, so whether that window can be used
    first_candidates: int = 0
    spans: list[TraceSpan] = []  # the round's requests on the answer's timeline (trace.py draws them)
    decided_s: float | None = None  # when the round's outcome was known, seconds since the answer started
    # roles whose requests failed or timed out in this round ("draft", "verifier"): its times and verdicts
    # measure the fault, not drafting, and the adaptive policy leaves them out (adaptive/faults.py)
    faults: list[str] = []


class RoleTokens(BaseModel):
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    def add(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> None:
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.cached_tokens += cached_tokens


class RunStats(BaseModel):
    """A lookahead run's statistics, as runtime/stats.py's RunMetrics observed them."""

    rounds: int = 0
    draft_steps_judged: int = 0
    draft_steps_accepted: int = 0
    acceptance_rate: float | None = None
    wall_time_s: float = 0.0
    finish: Literal["eos", "max_tokens"] = "eos"
    prompt_tokens: int = 0  # tokens of the prompt the run started from
    output_tokens: int = 0  # completion tokens of the kept steps
    draft: RoleTokens = Field(default_factory=RoleTokens)
    target: RoleTokens = Field(default_factory=RoleTokens)
    judge: RoleTokens = Field(default_factory=RoleTokens)
    target_branch_cache_ratio: float | None = None  # cached / prompt tokens over target branches
    degraded: list[str] = Field(default_factory=list)  # roles that failed and were worked around
    cost_model: CostEstimate | None = None  # what the adaptive policy had learned when the run ended


class LookaheadResult(BaseModel):
    text: str
    answer: str | None
    steps: list[StepRecord]
    round_log: list[RoundRecord]
    stats: RunStats


class BaselineResult(BaseModel):
    text: str
    answer: str | None
    wall_time_s: float
    prompt_tokens: int = 0
    output_tokens: int
    finish: Literal["eos", "max_tokens"]
