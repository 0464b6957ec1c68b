"""A simulated SGLang server: the HTTP API our programs use, with GPU-like timing.

A CPU cannot show a GPU's latency structure (a batch of γ decodes costs about as much
as one), so scheduler benchmarks run the real runtime and programs, over real HTTP,
against this server. It speaks the part of SGLang's API that the programs use:
`/generate` (single or batched `text`, with one `sampling_params` for all or one each;
the prefix commit with `max_new_tokens` 0; stop strings and SGLang's `finish_reason`
shapes; `e2e_latency`; regex-constrained yes/no answers with `output_top_logprobs`;
`input_token_logprobs` from `logprob_start_len` on, for `select`), `/model_info`,
`/get_model_info`, `/flush_cache` and `/health`.

Timing (the latency model): a request first waits a fixed `request_ms` and `prefill_ms`
per prompt token not in the prefix cache (a token trie, so `cached_tokens` is real), then joins a shared
decode loop in which every tick emits one token for each active request and lasts
`decode_ms * (1 + batch_slope * (active - 1))`. With `batch_slope` 0 a batch costs
what one request costs, the GPU regime the theory assumes.

Text: "tokens" are words. After the assistant turn begins, the reasoning is a fixed
sequence of `steps` steps of `step_tokens` tokens (or from that to `step_tokens_max`) separated by "\\n\\n"; the last ends
with EOS. The step index is the number of delimiters already in the assistant's text,
so a capped step continues where it stopped. A draft server writes other words than
a target server, and a draft request with a `sampling_seed` writes a variant of its
own, so tree candidates differ. Every word of a step names the step and the problem (a
hash of the turns before the answer). A judge request (one with a regex) answers yes with
probability α(step), decided by a hash of the seed and the prompt: deterministic. The
judge's prompt holds only the two steps, so a verdict is one draw per (problem, step,
candidate): independent across problems, and the same for every method that judges
that step, which compares methods on common draws. (Were the problem left out of any word, the
rest of a step that an AR stretch's token cap cut would read the same in every problem, and every
problem would draw one verdict there: a point would be one pattern of accepted and rejected steps.)

Faults: POST /sim/fault {"mode": "fail"} answers every request with HTTP 500,
{"mode": "stall"} never answers, {"mode": "ok"} heals.

Running servers: `SimServerThread` serves one in a thread of this process (tests);
`lookahead simserver` one in the foreground; eval/simcluster.py starts draft, target and judge in processes of
their own (the benchmarks, `--sim` runs and the load check).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from lookahead_reasoning.draws import unit
from lookahead_reasoning.runtime.servers.processes import UvicornThread

DELIM = "\n\n"
ASSISTANT = "<|im_start|>assistant\n"
EOS_ID = 2
TRIE_CAPACITY = 500_000  # tokens the prefix cache holds (a KV pool of a GPU server holds about this many)
_TOKEN = re.compile(r"\n\n|[^ \n]+ ?|\s")
_STEP_INDEX = re.compile(r"\bs(\d+)-")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


class SimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["draft", "target", "judge"]
    decode_ms: float = Field(10.0, gt=0, description="per-token decode time at batch size 1")
    batch_slope: float = Field(0.0, ge=0, description="relative extra decode time per extra concurrent request")
    prefill_ms: float = Field(0.0, ge=0, description="per uncached prompt token")
    request_ms: float = Field(0.0, ge=0, description="a request's fixed cost (scheduling, HTTP); requests in "
                              "flight pay it side by side")
    step_tokens: int = Field(10, ge=2)
    step_tokens_max: int | None = Field(None, ge=2, description="steps vary in length between step_tokens and this "
                                        "(per problem, step and writer); None: every step is step_tokens long")
    steps: int = Field(12, ge=1, description="steps until EOS")
    alpha: float = Field(0.6, gt=0, lt=1, description="judge acceptance probability")
    alpha_schedule: list[tuple[int, float]] = Field(
        default_factory=list, description="(from step, α) pairs that override alpha from that step on"
    )
    seed: int = 0

    @field_validator("alpha_schedule")
    @classmethod
    def _alphas(cls, schedule):
        for start, alpha in schedule:
            if start < 0 or not 0 < alpha < 1:
                raise ValueError(f"bad schedule entry ({start}, {alpha}): need step >= 0 and 0 < α < 1")
        return sorted(schedule)

    def alpha_at(self, step: int) -> float:
        alpha = self.alpha
        for start, value in self.alpha_schedule:
            if step >= start:
                alpha = value
        return alpha


class _Trie:
    """The prefix cache: a token trie of at most `capacity` tokens, as a server's KV pool is bounded. Two
    generations stand in for LRU eviction: inserts go to the current one, and when it holds half the
    capacity it becomes the previous one (the one before is dropped); a match looks in both, and a prompt
    that matched in the previous one is inserted into the current one with its completion, so what is in use
    stays. Unbounded, the trie would grow over a `bench load` grid to millions of nodes (about a gigabyte
    per server) and slow the server, so the grid's later points would measure the simulator's own slowdown."""

    def __init__(self, capacity: int = TRIE_CAPACITY):
        self.capacity = capacity
        self.current: dict = {}
        self.previous: dict = {}
        self.nodes = 0  # in the current generation

    @staticmethod
    def _match(node: dict, tokens: list[str]) -> int:
        n = 0
        for tok in tokens:
            node = node.get(tok)
            if node is None:
                break
            n += 1
        return n

    def match(self, tokens: list[str]) -> int:
        return max(self._match(self.current, tokens), self._match(self.previous, tokens))

    def insert(self, tokens: list[str]) -> None:
        if self.nodes >= self.capacity // 2:
            self.previous, self.current, self.nodes = self.current, {}, 0
        node = self.current
        for tok in tokens:
            child = node.get(tok)
            if child is None:
                child = node[tok] = {}
                self.nodes += 1
            node = child


class _DecodeLoop:
    """Continuous batching: each tick emits one token per active request."""

    def __init__(self, decode_s: float, slope: float):
        self.decode_s, self.slope = decode_s, slope
        self.active: list[list] = []  # [tokens left, future, request id, on_tick, tokens written]
        self.task: asyncio.Task | None = None
        self.batch_sizes: list[int] = []

    async def decode(self, tokens: int, rid: str | None = None, on_tick=None) -> int:
        """Decode `tokens` tokens (`on_tick(written)` after each); the tokens written, fewer where aborted."""
        if tokens <= 0:
            return 0
        future = asyncio.get_running_loop().create_future()
        self.active.append([tokens, future, rid, on_tick, 0])
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())
        return await future

    def abort(self, rid: str) -> bool:
        """End the request `rid` where it is (SGLang's /abort_request); whether one was running."""
        for entry in list(self.active):
            if entry[2] == rid:
                self.active.remove(entry)
                if not entry[1].done():
                    entry[1].set_result(entry[4])
                return True
        return False

    async def _run(self) -> None:
        deadline = time.perf_counter()
        while self.active:
            batch = len(self.active)
            self.batch_sizes.append(batch)
            deadline += self.decode_s * (1.0 + self.slope * (batch - 1))
            while (left := deadline - time.perf_counter()) > 0:
                await asyncio.sleep(left)  # uvloop's timers count whole milliseconds: they can wake a tick early
            for entry in list(self.active):
                entry[0] -= 1
                entry[4] += 1
                if entry[3] is not None:
                    entry[3](entry[4])
                if entry[0] == 0:
                    self.active.remove(entry)
                    if not entry[1].done():
                        entry[1].set_result(entry[4])
            deadline = max(deadline, time.perf_counter() - self.decode_s)  # no catch-up bursts after a stall


@dataclass
class SimState:
    config: SimConfig
    trie: _Trie = field(default_factory=_Trie)
    fault: str = "ok"
    requests: int = 0
    loop: _DecodeLoop | None = None
    last_sampling: dict = field(default_factory=dict)  # sampling_params of the latest request (for tests)


class SimEngine:
    """Request handling, separate from HTTP so it can be tested directly."""

    def __init__(self, config: SimConfig):
        self.state = SimState(config)
        self.state.loop = _DecodeLoop(config.decode_ms / 1000.0, config.batch_slope)

    def reconfigure(self, config: SimConfig) -> None:
        self.state.config = config
        self.state.loop.decode_s = config.decode_ms / 1000.0
        self.state.loop.slope = config.batch_slope
        self.state.trie = _Trie()

    # --- text model -------------------------------------------------------------------

    def _step_tokens(self, index: int, variant: int | None, problem: str) -> list[str]:
        """A step's tokens; every word names the step and the problem (see the module docstring)."""
        c = self.state.config
        tag = "t" if c.role != "draft" else f"d{variant or 0}"
        name = f"s{index}-{tag}.{problem}"
        length = c.step_tokens
        if c.step_tokens_max is not None and c.step_tokens_max > c.step_tokens:
            length += int(unit("length", c.seed, name) * (c.step_tokens_max - c.step_tokens + 1))
        return [f"{name} "] + [f"w{n}.{name} " for n in range(length - 2)] + [f"end{index}."]

    def _stream(self, prompt: str, variant: int | None) -> tuple[list[str], bool]:
        """The tokens that follow the prompt up to EOS, and whether the answer has begun."""
        c = self.state.config
        start = prompt.rfind(ASSISTANT)
        answer = prompt[start + len(ASSISTANT):] if start >= 0 else prompt
        problem = hashlib.sha256(prompt[:max(start, 0)].encode()).hexdigest()[:6]  # the turns before the answer
        index = answer.count(DELIM)
        written = len(tokenize(answer.rsplit(DELIM, 1)[-1])) if answer else 0
        out: list[str] = []
        for i in range(index, c.steps):
            step = self._step_tokens(i, variant, problem)
            out += step[written:] if i == index else step
            written = 0
            if i < c.steps - 1:
                out.append(DELIM)
        return out, start >= 0

    # --- requests -----------------------------------------------------------------------

    async def generate(self, body: dict) -> dict | list:
        text = body.get("text")
        if isinstance(text, list):  # a batch: one sampling_params for all, or one each (SGLang takes both)
            params = body.get("sampling_params")
            each = params if isinstance(params, list) else [params] * len(text)
            return list(await asyncio.gather(*(self._one({**body, "text": t, "sampling_params": p})
                                               for t, p in zip(text, each))))
        return await self._one(body)

    async def _one(self, body: dict, on_chunk=None) -> dict:
        """One request; `on_chunk(text, tokens)` hears the text written so far after every token (streaming)."""
        s = self.state
        s.requests += 1
        received = time.perf_counter()
        params = body.get("sampling_params") or {}
        s.last_sampling = params
        prompt = body.get("text") or ""
        prompt_tokens = tokenize(prompt)
        cached = min(s.trie.match(prompt_tokens), max(0, len(prompt_tokens) - 1))
        await asyncio.sleep((s.config.request_ms + s.config.prefill_ms * (len(prompt_tokens) - cached)) / 1000.0)
        max_new = params.get("max_new_tokens")
        max_new = 128 if max_new is None else int(max_new)
        logprob_fields: dict = {}
        if max_new == 0:
            out_tokens, reason = [], {"type": "length", "length": 0}
        elif params.get("regex"):
            out_tokens, reason, logprob_fields = self._judge(prompt)
        else:
            out_tokens, reason = self._continue(prompt, params, max_new)
        # EOS and a matched stop string are generated (then dropped) like any token: one tick each
        ticks = len(out_tokens) + (1 if reason.get("type") == "stop" else 0)

        def tick(written: int) -> None:
            if on_chunk is not None and written <= len(out_tokens):  # a stop string's token is not streamed
                on_chunk("".join(out_tokens[:written]), written)

        written = await s.loop.decode(ticks, body.get("rid"), tick)
        if written < ticks:  # aborted
            out_tokens, reason = out_tokens[:written], {"type": "abort", "message": "Abort request"}
        s.trie.insert(prompt_tokens + out_tokens)
        meta = {
            "id": f"sim-{s.requests}",
            "finish_reason": reason,
            "prompt_tokens": len(prompt_tokens),
            # as SGLang counts them: the EOS or the token that completed a stop string is generated, so counted
            "completion_tokens": written if reason.get("type") == "abort" else len(out_tokens) + (reason.get("type") == "stop"),
            "cached_tokens": cached,
            "e2e_latency": time.perf_counter() - received,
        }
        if body.get("return_logprob"):
            # as SGLang: from `logprob_start_len` on (`select` asks for them), none of the prompt without it
            start = body.get("logprob_start_len")
            start = len(prompt_tokens) if start is None or int(start) < 0 else int(start)
            meta["input_token_logprobs"] = [
                [None if i == 0 else -0.1 - 2 * unit("lp", tok), hash(tok) % 50000, tok]
                for i, tok in enumerate(prompt_tokens[start:])
            ]
            meta.setdefault("output_token_logprobs", [])
            meta.update(logprob_fields)
        return {"text": "".join(out_tokens), "meta_info": meta}

    def _continue(self, prompt: str, params: dict, max_new: int) -> tuple[list[str], dict]:
        stops = params.get("stop") or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        seed = params.get("sampling_seed")
        stream, _ = self._stream(prompt, seed if params.get("temperature") else None)
        out: list[str] = []
        for tok in stream:
            if len(out) == max_new:
                return out, {"type": "length", "length": max_new}
            if tok in stops:
                return out, {"type": "stop", "matched": tok}
            out.append(tok)
        if len(out) == max_new and stream:
            return out, {"type": "length", "length": max_new}
        return out, {"type": "stop", "matched": EOS_ID}

    def _judge(self, prompt: str) -> tuple[list[str], dict, dict]:
        c = self.state.config
        found = _STEP_INDEX.search(prompt[prompt.rfind("Step A:"):]) if "Step A:" in prompt else None
        alpha = c.alpha_at(int(found.group(1)) if found else 0)
        accept = unit(c.seed, prompt) < alpha
        p_yes = 0.95 if accept else 0.05
        top = [[math.log(p_yes), 9001, "yes"], [math.log(1 - p_yes), 9002, "no"]]
        answer = "yes" if accept else "no"
        fields = {
            "output_top_logprobs": [top],
            "output_token_logprobs": [[math.log(max(p_yes, 1 - p_yes)), 9001 if accept else 9002, answer]],
        }
        return [answer], {"type": "stop", "matched": EOS_ID}, fields


async def _event_stream(engine: SimEngine, body: dict):
    """A streamed request as SGLang sends it: a `data:` chunk with the cumulative text after every token, the
    finished generation last, then `data: [DONE]`."""
    chunks: asyncio.Queue = asyncio.Queue()
    task = asyncio.create_task(engine._one(body, lambda text, tokens: chunks.put_nowait((text, tokens))))
    task.add_done_callback(lambda _: chunks.put_nowait(None))
    while (chunk := await chunks.get()) is not None:
        text, tokens = chunk
        yield f"data: {json.dumps({'text': text, 'meta_info': {'completion_tokens': tokens, 'finish_reason': None}})}\n\n"
    yield f"data: {json.dumps(task.result())}\n\n"
    yield "data: [DONE]\n\n"


def build_app(engine: SimEngine) -> FastAPI:
    app = FastAPI(title=f"lookahead-sim ({engine.state.config.role})")
    info = {"model_path": f"lookahead-sim-{engine.state.config.role}", "is_generation": True}

    async def guard():
        if engine.state.fault == "fail":
            return JSONResponse({"error": {"message": "simulated failure"}}, status_code=500)
        if engine.state.fault == "stall":
            while engine.state.fault == "stall":
                await asyncio.sleep(0.05)
        return None

    @app.get("/model_info")
    @app.get("/get_model_info")
    async def model_info():
        return (await guard()) or info

    @app.get("/health")
    async def health():
        return (await guard()) or {}

    @app.post("/flush_cache")
    async def flush_cache():
        engine.state.trie = _Trie()
        return {}

    @app.post("/generate")
    async def generate(request: Request):
        refused = await guard()
        if refused:
            return refused
        body = await request.json()
        if body.get("stream") and not isinstance(body.get("text"), list):
            return StreamingResponse(_event_stream(engine, body), media_type="text/event-stream")
        # a JSONResponse as is: FastAPI's encoder would walk every logprob entry of the answer first
        return JSONResponse(await engine.generate(body))

    @app.post("/abort_request")
    async def abort_request(request: Request):
        body = await request.json()
        engine.state.loop.abort(str(body.get("rid")))
        return {}

    @app.post("/sim/fault")
    async def fault(request: Request):
        mode = (await request.json()).get("mode")
        if mode not in ("ok", "fail", "stall"):
            return JSONResponse({"error": {"message": "mode must be ok, fail or stall"}}, status_code=400)
        engine.state.fault = mode
        return {"mode": mode}

    @app.post("/sim/config")
    async def reconfigure(request: Request):
        """Replace settings (the role stays); the benchmark moves between grid points this way."""
        update = await request.json()
        update.pop("role", None)
        try:
            config = SimConfig.model_validate({**engine.state.config.model_dump(), **update})
        except ValueError as error:
            return JSONResponse({"error": {"message": str(error)}}, status_code=400)
        engine.reconfigure(config)
        return config.model_dump()

    @app.get("/sim/stats")
    async def stats():
        sizes = engine.state.loop.batch_sizes
        return {"requests": engine.state.requests, "ticks": len(sizes), "max_batch": max(sizes, default=0),
                "last_sampling": engine.state.last_sampling}

    return app


class SimServerThread(UvicornThread):
    """A simulated server on 127.0.0.1 in a background thread (for tests)."""

    def __init__(self, config: SimConfig, port: int = 0):
        self.engine = SimEngine(config)
        super().__init__(build_app(self.engine), port, on_exit=self._release_stalled)

    def _release_stalled(self) -> None:
        self.engine.state.fault = "ok"  # stalled handlers return, so the server can stop


def serve(config: SimConfig, port: int) -> None:
    """Run a simulated server in the foreground (the `lookahead simserver` command)."""
    import uvicorn

    uvicorn.run(build_app(SimEngine(config)), host="127.0.0.1", port=port, log_level="warning")
