"""The soak's clients: each sends plain, streaming and hostile requests (`HOSTILE`, the status each must
get) one after another, and records how every one ended (`Outcome`)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from lookahead_reasoning.eval.soak_stack import MAX_BODY_BYTES

if TYPE_CHECKING:
    from lookahead_reasoning.eval.soak import SoakSettings


# --- hostile requests: (name, method, path, body, the status it must get) ---------------------------------

def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _chat(**extra) -> dict:
    return {"messages": [{"role": "user", "content": "What is two and three?"}], "max_tokens": 32, **extra}


def _bytes(body: dict) -> bytes:
    return json.dumps(body).encode()  # ASCII: a lone surrogate goes out as the escape \\ud800


HOSTILE: list[tuple[str, str, str, bytes, int | None]] = [
    ("malformed JSON", "POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "q"', 400),
    ("trailing garbage", "POST", "/v1/chat/completions", _bytes(_chat()) + b" trailing", 400),
    ("not an object", "POST", "/v1/chat/completions", b"[1, 2, 3]", 400),
    ("empty body", "POST", "/v1/chat/completions", b"", 400),
    ("not UTF-8", "POST", "/v1/chat/completions", b"\xff\xfe\x00garbage", 400),
    ("NaN", "POST", "/v1/chat/completions",
     b'{"messages": [{"role": "user", "content": "q"}], "temperature": NaN}', 400),
    ("deep nesting", "POST", "/v1/chat/completions", _nested(10_000).encode(), 400),
    ("long integer", "POST", "/v1/chat/completions",
     b'{"messages": [{"role": "user", "content": "q"}], "max_tokens": ' + b"9" * 5000 + b"}", 400),
    ("huge max_tokens", "POST", "/v1/chat/completions", _bytes(_chat(max_tokens=10**9)), 400),
    ("huge max_completion_tokens", "POST", "/v1/completions",
     _bytes({"prompt": "q", "max_completion_tokens": 2**62}), 400),
    ("max_tokens 0", "POST", "/v1/chat/completions", _bytes(_chat(max_tokens=0)), 400),
    ("max_tokens as text", "POST", "/v1/chat/completions", _bytes(_chat(max_tokens="12")), 400),
    ("max_tokens as float", "POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "q"}], '
     b'"max_tokens": 1e3}', 400),
    ("stream as text", "POST", "/v1/chat/completions", _bytes(_chat(stream="yes")), 400),
    ("stop as number", "POST", "/v1/chat/completions", _bytes(_chat(stop=7)), 400),
    ("five stop strings", "POST", "/v1/chat/completions", _bytes(_chat(stop=list("abcde"))), 400),
    ("messages as text", "POST", "/v1/chat/completions", _bytes({"messages": "hello"}), 400),
    ("content as number", "POST", "/v1/chat/completions", _bytes({"messages": [{"role": "user", "content": 5}]}), 400),
    ("unknown role", "POST", "/v1/chat/completions", _bytes({"messages": [{"role": "wizard", "content": "q"}]}), 400),
    ("no messages", "POST", "/v1/chat/completions", _bytes({"messages": []}), 400),
    ("image part", "POST", "/v1/chat/completions", _bytes({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/x.png"}}]}]}), 400),
    ("lone surrogate", "POST", "/v1/chat/completions",
     _bytes({"messages": [{"role": "user", "content": "\ud800 lone"}]}), 400),
    ("lone surrogate, streamed", "POST", "/v1/chat/completions",
     _bytes({"messages": [{"role": "user", "content": "x\udfff"}], "stream": True}), 400),
    ("lone surrogate in stop", "POST", "/v1/chat/completions", _bytes(_chat(stop=["ok", "\ud83d"])), 400),
    ("lone surrogate in prompt", "POST", "/v1/completions", _bytes({"prompt": "a \ud800 b"}), 400),
    ("logprobs", "POST", "/v1/chat/completions", _bytes(_chat(logprobs=True)), 400),
    ("n 2", "POST", "/v1/chat/completions", _bytes(_chat(n=2)), 400),
    ("json_schema", "POST", "/v1/chat/completions", _bytes(_chat(response_format={"type": "json_schema"})), 400),
    ("unknown model", "POST", "/v1/chat/completions", _bytes(_chat(model="gpt-9")), 404),
    ("over the body limit", "POST", "/v1/chat/completions", _bytes(_chat(padding="x" * (MAX_BODY_BYTES + 8192))), 413),
    ("unknown route", "GET", "/v1/nothing", b"", 404),
    ("wrong method", "GET", "/v1/chat/completions", b"", 405),
    # valid, if odd: answered like any request (no status is required of them)
    ("unknown fields", "POST", "/v1/chat/completions",
     _bytes(_chat(frobnicate={"deep": [1, {"x": None}]}, metadata={"k": "v"}, user="soak", reasoning_effort="high")),
     None),
    ("NUL and RTL", "POST", "/v1/chat/completions",
     _bytes({"messages": [{"role": "user", "content": "nul \x00 and \u202e rtl"}], "max_tokens": 16}), None),
    ("long content", "POST", "/v1/chat/completions",
     _bytes({"messages": [{"role": "user", "content": "x " * 10_000}], "max_tokens": 16}), None),
]

# what a client sends next, and how often
KINDS = {
    "chat": 0.22,            # model lookahead, plain
    "chat stream": 0.16,     # model lookahead, streamed
    "target": 0.10,          # model target (AR), plain
    "target stream": 0.06,   # model target, streamed
    "completion": 0.04,      # /v1/completions, model lookahead
    "leave mid-stream": 0.10,
    "hostile": 0.32,
}


@dataclass
class Outcome:
    end_s: float  # since the soak started
    kind: str
    status: str  # "200", "429", ..., "left" (the client hung up on purpose), "lost"
    latency_s: float
    degraded: bool = False
    drafted: bool = False  # a `lookahead` answer that judged draft steps (the adaptive policy may run AR)
    detail: str = ""  # why lost, or what was wrong with an error's body
    unexpected: str = ""  # a hostile request that got another status than it must: which, and what it got


class Clients:
    """The soak's clients on one HTTP connection pool; `run` is one client, its outcomes go to `outcomes`."""

    def __init__(self, url: str, settings: SoakSettings, started: float):
        self.url, self.settings, self.started = url, settings, started
        self.outcomes: list[Outcome] = []
        # no keep-alive: a connection the server closes as idle, just as a request goes out on it, would
        # read as a lost request here (no status), though no server would have seen that request
        self.http = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
            timeout=httpx.Timeout(settings.client_timeout_s, connect=10.0), trust_env=False)

    def now(self) -> float:
        return time.monotonic() - self.started

    async def run(self, index: int, stop_at: float) -> None:
        rng = random.Random(f"{self.settings.seed}-{index}")
        kinds, weights = list(KINDS), list(KINDS.values())
        n = 0
        while time.monotonic() < stop_at:
            kind = rng.choices(kinds, weights)[0]
            hostile = rng.choice(HOSTILE) if kind == "hostile" else None
            t0 = time.monotonic()
            try:
                async with asyncio.timeout(self.settings.client_timeout_s):
                    if hostile:
                        status, stats, detail = await self._hostile(*hostile[1:4])
                    else:
                        status, stats, detail = await self._send(kind, rng, f"Client {index} question {n}")
            except TimeoutError:
                status, stats, detail = "lost", {}, f"no answer within {self.settings.client_timeout_s:g} s"
            except httpx.HTTPError as error:  # refused, reset, closed without a response, not HTTP
                status, stats, detail = "lost", {}, f"{type(error).__name__}: {error}"[:200]
            outcome = Outcome(self.now(), kind if not hostile else f"hostile: {hostile[0]}", status,
                              time.monotonic() - t0, bool(stats.get("degraded")),
                              (stats.get("draft_steps_judged") or 0) > 0, detail)
            if hostile and hostile[4] is not None and status not in (str(hostile[4]), "lost"):
                outcome.unexpected = f"{hostile[0]}: {status}, not {hostile[4]}"
            self.outcomes.append(outcome)
            n += 1
            answered = status in ("200", "left") or (hostile is not None and status.startswith("4"))
            await asyncio.sleep(rng.uniform(0.0, 0.4) if answered else rng.uniform(0.5, 1.5))  # back off on errors

    async def _hostile(self, method: str, path: str, body: bytes) -> tuple[str, dict, str]:
        headers = {"Content-Type": "application/json"} if method == "POST" else {}
        return self._plain(await self.http.request(method, self.url + path, content=body, headers=headers))

    async def _send(self, kind: str, rng: random.Random, question: str) -> tuple[str, dict, str]:
        """(status, the answer's `lookahead` statistics or {}, detail) of one request of `kind`."""
        if kind == "leave mid-stream":
            model = "target" if rng.random() < 0.2 else "lookahead"
        else:
            model = "target" if kind.startswith("target") else "lookahead"
        stream = kind.endswith("stream")
        body: dict = {"model": model, "stream": stream}
        if kind == "completion":
            path, body["prompt"] = "/v1/completions", question + "? Think step by step."
        else:
            path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": question + "?"}]
        max_tokens = rng.choice([None, None, 24, 64, 200])
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if rng.random() < 0.3:
            body |= {"temperature": 0.7, "seed": rng.randrange(1 << 31)}
        if rng.random() < 0.1:
            body["stop"] = ["end3."]  # a simulated step's last word
        content = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if not stream:
            res = await self.http.post(self.url + path, content=content, headers=headers)
            return self._plain(res)
        async with self.http.stream("POST", self.url + path, content=content, headers=headers) as res:
            if res.status_code != 200:
                await res.aread()
                return self._plain(res)
            return await self._events(res, leave_after=rng.randint(1, 3) if kind == "leave mid-stream" else None)

    @staticmethod
    def _plain(res: httpx.Response) -> tuple[str, dict, str]:
        status = str(res.status_code)
        try:
            body = res.json()
        except ValueError:
            body = None
        if res.status_code == 200:
            if not isinstance(body, dict) or not body.get("choices"):
                return "lost", {}, f"a 200 that is no answer: {res.text[:120]!r}"
            return status, body.get("lookahead") or {}, ""
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict) or error.get("code") != res.status_code:
            return status, {}, f"an error not in OpenAI's shape: {res.text[:120]!r}"
        return status, {}, ""

    @staticmethod
    async def _events(res: httpx.Response, leave_after: int | None) -> tuple[str, dict, str]:
        """A stream to its end: "200" (with the final chunk's statistics), the code of its error event, or
        lost when it stops before `[DONE]`. With `leave_after`, the client hangs up after that many events."""
        events, error, final = 0, None, None
        async for line in res.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                if error is not None:
                    return str(error.get("code")), {}, ""
                if final is None:
                    return "lost", {}, "a stream without its final chunk"
                return "200", final.get("lookahead") or {}, ""
            try:
                event = json.loads(data)
            except ValueError:
                return "lost", {}, f"an event that is not JSON: {data[:120]!r}"
            events += 1
            if "error" in event:
                error = event["error"]
            elif event.get("choices") and event["choices"][0].get("finish_reason") is not None:
                final = event
            if leave_after is not None and events >= leave_after:
                return "left", {}, ""  # leaving the block closes the connection mid-stream
        return "lost", {}, "the stream ended before [DONE]"

    async def close(self) -> None:
        await self.http.aclose()


async def final_check(clients: Clients) -> dict:
    """Once every server is back: the frontend answers a request (its slots and connections recovered)."""
    body = {"model": "lookahead", "messages": [{"role": "user", "content": "The last question?"}], "max_tokens": 64}
    for _ in range(30):  # readiness is cached for a second, and a restarted server's first answers can be slow
        try:
            res = await clients.http.post(clients.url + "/v1/chat/completions", json=body, timeout=60)
            if res.status_code == 200:
                return {"status": 200, "degraded": bool(res.json()["lookahead"]["degraded"])}
            last = {"status": res.status_code, "body": res.text[:200]}
        except httpx.HTTPError as error:
            last = {"status": None, "error": f"{type(error).__name__}: {error}"}
        await asyncio.sleep(1.0)
    return last
