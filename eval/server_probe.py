"""Measuring the servers directly: the ground truth for the costs the adaptive policy learns.

`lookahead servers probe` times plain requests of known shape against the draft, target and
judge servers, and reports what the cost model (runtime/adaptive/cost_model.py) estimates from the
rounds of a run. Every request is greedy with `ignore_eos`, so it writes exactly the tokens
asked; every figure is the median over `repeats` measurements; the figures are measured one
after another, never two at once, so no measurement shares a server with another.

- B(n), the fork cost: the time of one batched `/generate` of n texts (a common prefix, then a
  few words of each branch's own, as a fork's branches are), each continued by L tokens, over
  the time of one such request. The prefix and the branches' texts are prefilled first, so
  this is decoding alone. The single request is timed next to each batch, in the same loop
  (alternately before and after it), and B(n) is the median of those paired ratios, so a
  drift of the server's speed does not bias it. The cost model's B(n) is this figure for
  one run: 1 + s (n − 1) with its learned slope s; B ≈ 1 where a batch is nearly free (a GPU,
  a CPU in bfloat16 with AMX), B ≈ n where it is not (a CPU in float32).
- The target alone: T = o + L·t fitted through single requests of two lengths (`short_tokens`
  and L): t, seconds per token, and o, a request's fixed cost (HTTP, scheduling, the prefill
  of its few uncached tokens). The cost model's t₁ and o.
- c: the draft's time for a request of L tokens over the target's, both alone. The cost
  model's c for steps of L tokens (it prices a drafted step as its whole request time).
  `c_per_token` is the ratio of the fitted per-token times, which leaves the fixed costs out.
- The judge: one call of the project's judge program (programs/judge.py) on one pair of fresh
  steps of about L tokens each, its instructions already cached, as a round sends it. In
  seconds, in target tokens (over t), and as j, in target requests of L tokens (over the
  target's T(L)): the cost model's j for a round of one pair.
- Side by side: a draft request and a target request of L tokens sent at the same moment, each's
  time over its time alone, and the two together (until the later ends) over the two one after the
  other. What an async round's overlap of drafting and verifying costs: on a GPU, or servers on their
  own cores, each ratio is near 1 and together over serial near max(1, c)/(1 + c); where the servers
  share a CPU's cores, the ratios show what each takes from the other (together over serial ≥ 1:
  overlapping gains nothing).
- Prefill: a fresh random prompt of about `prompt_tokens` tokens, one token written, less
  o + t, per uncached token (the server's own count); then the same prompt again, now in the
  radix cache, per cached token (near 0 where the cache works; o already holds the cached
  prefill of the probe's own short prompt).
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable

from pydantic import BaseModel, Field

from lookahead_reasoning.errors import LookaheadError, first_line
from lookahead_reasoning.programs.backend import BackendError, LookaheadEndpoint
from lookahead_reasoning.programs.judge import judge_pairs
from lookahead_reasoning.programs.step_types import StepOutput
from lookahead_reasoning.programs.steps import continue_texts
from lookahead_reasoning.runtime.servers.endpoints import ROLES, Endpoints

DEFAULT_WIDTHS = (2, 3, 4, 5, 6, 7, 8)
PREFIX_WORDS = 40  # the probe's common prefix
# common short words: one token each in most tokenizers, so that a prompt's length in tokens is easy to aim at
WORDS = (
    "the of and to in is was for on are with as at be by this from or have not but had they which one you "
    "were all we when there can an more if no so what up out about who into time has two than them some its "
    "only new now way may any most over such make like long very first then well back also here where"
).split()


class WidthCost(BaseModel):
    width: int = Field(description="n: requests in the batch")
    single_s: float = Field(description="one request of L tokens, median over the repeats")
    batch_s: float = Field(description="one batched /generate of n such requests, median over the repeats")
    b: float = Field(description="B(n): median of batch over the single request timed beside it")


class LineFit(BaseModel):
    """T = fixed_s + L · per_token_s, through single requests of two lengths."""

    fixed_s: float = Field(description="o: a request's fixed cost")
    per_token_s: float = Field(description="t: seconds per token, alone")

    def at(self, tokens: float) -> float:
        return self.fixed_s + tokens * self.per_token_s


class ServerProbe(BaseModel):
    """What `lookahead servers probe` measured; see the module docstring for what each figure means."""

    target_url: str
    draft_url: str
    judge_url: str
    tokens: int = Field(description="L: tokens each timed request writes")
    short_tokens: int = Field(description="the second length of the fits")
    repeats: int
    fork: list[WidthCost] = Field(description="B(n) for each width")
    target: LineFit
    target_single_s: float = Field(description="the target, one request of L tokens (median)")
    draft: LineFit
    draft_single_s: float = Field(description="the draft, one request of L tokens (median)")
    c: float = Field(description="draft time over target time, one request of L tokens each")
    c_per_token: float = Field(description="the draft's fitted seconds per token over the target's")
    judge_s: float = Field(description="one judge call on one pair of fresh steps (median)")
    judge_target_tokens: float = Field(description="judge_s in target tokens: judge_s / t")
    j: float = Field(description="judge_s in target requests of L tokens: judge_s / T(L)")
    # None in a probe file that did not measure them
    target_beside_draft: float | None = Field(
        None, description="a target request sent with a draft request, over the target alone")
    draft_beside_target: float | None = Field(
        None, description="a draft request sent with a target request, over the draft alone")
    together_over_serial: float | None = Field(
        None, description="the two sent together, until the later ends, over the two one after the other")
    prefill_prompt_tokens: int = Field(description="tokens of the fresh prompt, as the server counted them")
    prefill_uncached_s_per_token: float = Field(description="seconds per uncached prompt token")
    prefill_cached_s_per_token: float = Field(description="seconds per cached prompt token")


def connect(endpoints: Endpoints, timeout_s: float) -> dict[str, LookaheadEndpoint]:
    """role -> backend; roles that share a URL share one. An unreachable server is a one-line error."""
    by_url: dict[tuple[str, str | None], LookaheadEndpoint] = {}
    backends = {}
    for role in ROLES:
        spec = getattr(endpoints, role)
        key = (spec.url, spec.chat_template)
        if key not in by_url:
            with failures_named(role):
                try:
                    by_url[key] = LookaheadEndpoint(spec.url, chat_template=spec.chat_template, timeout_s=timeout_s)
                except (KeyError, ValueError) as error:  # an unknown chat template name
                    raise LookaheadError(f"{role} server: {first_line(error)}") from None
        backends[role] = by_url[key]
    return backends


@contextmanager
def failures_named(role: str):
    """A server's failure as a one-line error that names its role."""
    try:
        yield
    except BackendError as error:
        raise LookaheadError(f"{role} server: {first_line(error)}") from None


def timed(call: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def random_words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(1, count)))


def branch_texts(prefix: str, width: int) -> list[str]:
    """A fork's texts: the common prefix, then a few words of each branch's own."""
    return [f"{prefix} branch {i} says" for i in range(width)]


def fit_line(short: tuple[float, float], long: tuple[float, float]) -> LineFit:
    """T = o + L t through two (tokens, seconds) points; an error where time did not grow with length."""
    (l1, t1), (l2, t2) = short, long
    per_token = (t2 - t1) / (l2 - l1)
    if not per_token > 0:
        raise LookaheadError(
            f"requests of {l2:g} tokens took no longer than requests of {l1:g} ({t2:.3f} s against {t1:.3f} s): "
            "the timings are noise; raise --tokens or --repeats"
        )
    return LineFit(fixed_s=t1 - l1 * per_token, per_token_s=per_token)


def written(outputs: list[StepOutput], asked: int) -> int:
    """Tokens a request wrote, as the server counted them (the asked number where it did not say)."""
    return outputs[0].completion_tokens or asked


class Samples:
    """Timings by name; each figure is a median of its list."""

    def __init__(self):
        self.lists: dict[str, list[float]] = defaultdict(list)

    def add(self, name: str, value: float) -> float:
        self.lists[name].append(value)
        return value

    def median(self, name: str) -> float:
        return statistics.median(self.lists[name])


def check_settings(tokens: int, short_tokens: int, widths: list[int], repeats: int, prompt_tokens: int) -> None:
    """Bad settings as a one-line error, before any server is asked."""
    if not 1 <= short_tokens < tokens:
        raise LookaheadError(f"the short requests write fewer tokens than the long ones, at least 1: got "
                             f"{short_tokens} and {tokens}")
    if not widths or min(widths) < 2:
        raise LookaheadError(f"fork widths are at least 2, got {widths}")
    if repeats < 1 or prompt_tokens < 1:
        raise LookaheadError(f"repeats and prompt tokens are at least 1, got {repeats} and {prompt_tokens}")


class Probe:
    """One probe of one server set: `measure()` runs `repeats` rounds of every measurement, then `result()`."""

    def __init__(self, backends: dict[str, LookaheadEndpoint], tokens: int, short_tokens: int,
                 widths: list[int], repeats: int, prompt_tokens: int, log: Callable[[str], None] | None = None):
        check_settings(tokens, short_tokens, widths, repeats, prompt_tokens)
        self.backends = backends
        self.tokens, self.short_tokens, self.widths = tokens, short_tokens, sorted(set(widths))
        self.repeats, self.prompt_tokens = repeats, prompt_tokens
        self.log = log or (lambda message: None)
        self.samples = Samples()
        self.tokens_written: dict[str, list[int]] = defaultdict(list)
        self.rng = random.Random(os.urandom(16))  # fresh prompts, also against a server that ran a probe before
        self.prefix = random_words(random.Random(0), PREFIX_WORDS)
        self.texts = branch_texts(self.prefix, max(self.widths))
        self.words_per_token = 1.0
        self.prefill_prompt_tokens = 0

    # --- one request shape each ---------------------------------------------------------------------

    def continuation(self, role: str, texts: list[str], tokens: int) -> tuple[float, list[StepOutput]]:
        with failures_named(role):
            return timed(lambda: continue_texts(self.backends[role], texts, tokens))

    def single(self, role: str, tokens: int, name: str) -> float:
        seconds, outputs = self.continuation(role, self.texts[:1], tokens)
        self.tokens_written[name].append(written(outputs, tokens))
        return self.samples.add(name, seconds)

    def judge_call(self) -> float:
        """One judge call on one pair of fresh steps of about L tokens each, the instructions cached."""
        words = max(1, round(self.tokens * self.words_per_token))
        pair = (random_words(self.rng, words), random_words(self.rng, words))
        with failures_named("judge"):
            seconds, _ = timed(lambda: judge_pairs(self.backends["judge"], [pair], commit_instructions=False))
        return self.samples.add("judge", seconds)

    def side_by_side(self) -> None:
        """A target request and a draft request of L tokens sent at the same moment, each timed."""
        with ThreadPoolExecutor(2) as pool:
            target = pool.submit(self.continuation, "target", self.texts[:1], self.tokens)
            draft = pool.submit(self.continuation, "draft", self.texts[:1], self.tokens)
            target_s, draft_s = target.result()[0], draft.result()[0]
        self.samples.add("beside_target", target_s)
        self.samples.add("beside_draft", draft_s)
        self.samples.add("together", max(target_s, draft_s))

    def prefill(self) -> None:
        """A fresh prompt of about `prompt_tokens` tokens, one token written; then the same prompt, cached."""
        prompt = random_words(self.rng, round(self.prompt_tokens * self.words_per_token))
        seconds, outputs = self.continuation("target", [prompt], 1)
        fresh = outputs[0]
        self.prefill_prompt_tokens = fresh.prompt_tokens
        self.samples.add("fresh", seconds)
        self.samples.add("fresh_uncached", max(1, fresh.prompt_tokens - fresh.cached_tokens))
        seconds, outputs = self.continuation("target", [prompt], 1)
        self.samples.add("cached", seconds)
        self.samples.add("cached_tokens", max(1, outputs[0].cached_tokens))

    # --- the loop -----------------------------------------------------------------------------------

    def warm(self) -> None:
        """Prefill the prefix and every branch's text on the target and the draft, run one short batch of
        the widest fork (a server's first batch of a size can be slow), and commit the judge's instructions
        with one call, so that what is timed next is what a round pays."""
        for role in ("target", "draft"):
            with failures_named(role):
                self.backends[role].cache_prefix(self.prefix)
            _, outputs = self.continuation(role, self.texts, 2)
            if role == "target":
                prompt_tokens = outputs[0].prompt_tokens
                if prompt_tokens > 0:
                    self.words_per_token = len(self.texts[0].split()) / prompt_tokens
            self.continuation(role, self.texts[:1], 2)
        with failures_named("judge"):
            judge_pairs(self.backends["judge"], [("warm up", "warm up")], commit_instructions=True)

    def fork_pair(self, repeat: int, index: int, width: int) -> float:
        """B(width) once: the batch and a single request beside it, in alternating order."""
        name = f"fork{width}"
        if (repeat + index) % 2 == 0:
            one = self.single("target", self.tokens, "single")
            seconds, _ = self.continuation("target", self.texts[:width], self.tokens)
        else:
            seconds, _ = self.continuation("target", self.texts[:width], self.tokens)
            one = self.single("target", self.tokens, "single")
        self.samples.add(f"single{width}", one)
        self.samples.add(name, seconds)
        return self.samples.add(f"b{width}", seconds / one)

    def measure(self) -> None:
        self.warm()
        for repeat in range(self.repeats):
            ratios = [self.fork_pair(repeat, i, width) for i, width in enumerate(self.widths)]
            self.single("target", self.short_tokens, "short")
            self.single("draft", self.tokens, "draft")
            self.single("draft", self.short_tokens, "draft_short")
            judge_s = self.judge_call()
            self.side_by_side()
            self.prefill()
            shown = ", ".join(f"B({w}) {r:.2f}" for w, r in zip(self.widths, ratios))
            self.log(f"repeat {repeat + 1}/{self.repeats}: {shown}; target {self.samples.lists['single'][-1]:.3f} s, "
                     f"draft {self.samples.lists['draft'][-1]:.3f} s, judge {judge_s:.3f} s")

    # --- the figures --------------------------------------------------------------------------------

    def fit(self, short: str, long: str) -> LineFit:
        m = self.samples.median
        return fit_line((statistics.median(self.tokens_written[short]), m(short)),
                        (statistics.median(self.tokens_written[long]), m(long)))

    def result(self, endpoints: Endpoints) -> ServerProbe:
        m = self.samples.median
        target, draft = self.fit("short", "single"), self.fit("draft_short", "draft")
        single, draft_single = m("single"), m("draft")
        one_token = target.at(1)
        return ServerProbe(
            target_url=endpoints.target.url, draft_url=endpoints.draft.url, judge_url=endpoints.judge.url,
            tokens=self.tokens, short_tokens=self.short_tokens, repeats=self.repeats,
            fork=[WidthCost(width=w, single_s=m(f"single{w}"), batch_s=m(f"fork{w}"), b=m(f"b{w}")) for w in self.widths],
            target=target, target_single_s=single, draft=draft, draft_single_s=draft_single,
            c=draft_single / single, c_per_token=draft.per_token_s / target.per_token_s,
            judge_s=m("judge"), judge_target_tokens=m("judge") / target.per_token_s, j=m("judge") / single,
            target_beside_draft=m("beside_target") / single, draft_beside_target=m("beside_draft") / draft_single,
            together_over_serial=m("together") / (single + draft_single),
            prefill_prompt_tokens=self.prefill_prompt_tokens,
            prefill_uncached_s_per_token=(m("fresh") - one_token) / m("fresh_uncached"),
            prefill_cached_s_per_token=(m("cached") - one_token) / m("cached_tokens"),
        )


def probe_servers(
    endpoints: Endpoints, tokens: int = 40, widths: list[int] = list(DEFAULT_WIDTHS), repeats: int = 3,
    short_tokens: int = 8, prompt_tokens: int = 300, timeout_s: float = 300.0,
    log: Callable[[str], None] | None = None,
) -> ServerProbe:
    """Measure B(n), the target's o and t, c, the judge's cost, the draft and target side by side and the
    prefill rates (module docstring)."""
    check_settings(tokens, short_tokens, widths, repeats, prompt_tokens)
    probe = Probe(connect(endpoints, timeout_s), tokens, short_tokens, widths, repeats, prompt_tokens, log)
    probe.log(f"probing {endpoints.target.url} (target), {endpoints.draft.url} (draft), {endpoints.judge.url} (judge)…")
    probe.measure()
    return probe.result(endpoints)
