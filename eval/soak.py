"""`lookahead bench soak`: a long load test with faults, for what single requests cannot find.

It starts three simulated SGLang servers (eval/simserver.py) and `lookahead serve` in front of
them, each as a process of its own, then runs `clients` concurrent clients for `duration_s`.
Each client sends, one after another: plain and streaming chat completions for both models
(`lookahead` and `target`), a few text completions, streams it hangs up on after the first
events, and hostile requests (malformed JSON, wrong types, huge `max_tokens`, lone surrogates,
deep nesting, unknown fields, bodies over the limit, ...; `HOSTILE`). Every `fault_every_s`
seconds one simulated server is killed (SIGKILL, then restarted on the same port) or stalled
(SIGSTOP, then SIGCONT) for `hold_s`, the draft, the judge and the target in turn, kill and stall
alternating, so three faults hit every role and both kinds.

Each request ends as one of: an answer (200; `drafted` when its run judged draft steps, `degraded`
when its `lookahead.degraded` names a failed server), an error with its status code (for a stream,
the code of the error event in it), a stream the client left on purpose, or lost: no status and
no clean error (connection refused or reset, a stream cut before `[DONE]`, a 200 whose body is not
an answer, or no answer within `client_timeout_s`). The report counts them, gives p50/p99 latency of answers and the
frontend's RSS, threads and open files per minute (read from /proc/PID/status), lists the
faults, and ends with one more request once every server is back. Faults stop a fault period
before the end, and the report compares the drafted answers per minute before the first fault and
after the last. It fails (`passed` false) on any lost request, any 500, when that last request is
not answered, or when drafting did not come back to 80 % of its rate before the faults.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import httpx
from pydantic import BaseModel, Field

from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.eval.loadtest import percentile
from lookahead_reasoning.runtime.servers.processes import (
    answers, dies_with_parent, free_port, port_in_use, stop_group, wait_until,
)

ROLES = ("draft", "judge", "target")  # the order faults take
FAULTS = ("kill", "stall")
WINDOW_S = 60.0  # the report's rows
DRAFTING_BACK = 0.8  # after the last fault, drafted answers per minute must come back to this share of the first's
RECOVERY_SETTLE_S = 15.0  # ...counted from this long after the fault ended (runs the fault degraded end first)
RECOVERY_MIN_S = 30.0  # ...over at least this long, else the soak is too short to tell
SAMPLE_EVERY_S = 2.0  # the frontend's RSS, threads and open files
START_TIMEOUT_S = 180.0  # the frontend imports SGLang's frontend; a loaded machine is slow
MAX_BODY_BYTES = 32 * 1024  # the frontend's limit here: an over-limit body is sent whole before the 413
LOOKAHEAD = [sys.executable, "-m", "lookahead_reasoning.cli"]

# The target 20 ms a token, the draft 4 ms, the judge 10 ms; 8 steps of 8 tokens. Target branches stream one
# event a token, which the frontend parses: at a few ms a token that parsing, not the servers, would decide
# whether drafting pays, the policy would rightly run AR, and the soak would not see drafting come back.
SIM_SHAPE = ["--steps", "8", "--step-tokens", "8"]
SIM_ARGS = {
    "draft": ["--decode-ms", "4"],
    "target": ["--decode-ms", "20"],
    "judge": ["--decode-ms", "10", "--alpha", "0.7"],
}


class SoakSettings(BaseModel):
    duration_s: float = Field(600.0, gt=0, description="seconds of load")
    clients: int = Field(64, ge=1, le=1024, description="concurrent clients")
    fault_every_s: float = Field(60.0, gt=0, description="seconds between faults")
    max_concurrent: int = Field(8, ge=1, description="the frontend's --max-concurrent")
    queue_timeout_s: float = Field(30.0, ge=0, description="the frontend's --queue-timeout")
    seed: int = 0

    @property
    def hold_s(self) -> float:
        """How long a killed server stays down, or a stalled one stopped."""
        return 0.6 * self.fault_every_s

    @property
    def request_timeout_s(self) -> float:
        """The frontend's --request-timeout. Its draft and judge requests time out after a quarter of it,
        less than `hold_s`: a stalled draft or judge degrades the runs instead of holding them."""
        return max(10.0, 1.5 * self.hold_s)

    @property
    def client_timeout_s(self) -> float:
        """A request with no answer by now is lost: a slot's wait, the frontend's deadline, and a minute."""
        return self.queue_timeout_s + self.request_timeout_s + 60.0


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


# --- processes --------------------------------------------------------------------------------------------

class _Child:
    """One process of the stack, in a process group of its own; dies with this process (Linux)."""

    def __init__(self, name: str, command: list[str], log: Path):
        self.name, self.command, self.log = name, command, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(dies_with_parent(self.command), stdout=subprocess.DEVNULL, stderr=log,
                                         start_new_session=True)

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        if self.proc is not None:
            self.signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            stop_group(self.proc, grace_s=10)


class SoakStack:
    """Three simulated servers and `lookahead serve`, each a process of its own, logs in `log_dir`."""

    def __init__(self, settings: SoakSettings, log_dir: Path):
        self.settings, self.log_dir = settings, log_dir
        self.ports = {role: free_port() for role in ROLES}
        self.urls = {role: f"http://127.0.0.1:{port}" for role, port in self.ports.items()}
        self.sims = {role: _Child(f"simulated {role} server", self._sim_command(role), log_dir / f"sim-{role}.log")
                     for role in ROLES}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.frontend = _Child("lookahead serve", self._serve_command(), log_dir / "serve.log")

    def _sim_command(self, role: str) -> list[str]:
        return [*LOOKAHEAD, "simserver", "--role", role, "--port", str(self.ports[role]), *SIM_SHAPE, *SIM_ARGS[role],
                "--seed", str(self.settings.seed)]

    def _serve_command(self) -> list[str]:
        s = self.settings
        return [*LOOKAHEAD, "serve", "--draft-url", self.urls["draft"], "--target-url", self.urls["target"],
                "--judge-url", self.urls["judge"], "--chat-template", "chatml", "--port", str(self.port),
                "--max-concurrent", str(s.max_concurrent), "--queue-timeout", f"{s.queue_timeout_s:g}",
                "--request-timeout", f"{s.request_timeout_s:g}", "--max-body-bytes", str(MAX_BODY_BYTES),
                "--threshold", "0.5"]  # no saved calibration changes what the judge accepts

    def __enter__(self) -> SoakStack:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for role in ROLES:
                self.sims[role].start()
            for role in ROLES:
                self.wait_for_sim(role)
            self.frontend.start()
            proc = self.frontend.proc
            try:
                wait_until(lambda: _live(self.url), lambda: proc.poll() is None, START_TIMEOUT_S, "lookahead serve")
            except RuntimeError as error:
                raise LookaheadError(f"{error}; its log: {self.frontend.log}") from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def wait_for_sim(self, role: str) -> None:
        proc, url = self.sims[role].proc, self.urls[role]
        try:
            wait_until(lambda: answers(url), lambda: proc.poll() is None, 60.0, f"simulated {role} server")
        except RuntimeError as error:
            raise LookaheadError(f"{error}; its log: {self.sims[role].log}") from None

    def restart(self, role: str) -> None:
        """A killed server again, on the same port (a socket in TIME_WAIT does not block it)."""
        deadline = time.monotonic() + 10
        while port_in_use(self.ports[role]) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.sims[role].start()
        self.wait_for_sim(role)

    def __exit__(self, *exc) -> None:
        self.frontend.stop()
        for child in self.sims.values():
            child.stop()


def _live(url: str) -> bool:
    try:
        return httpx.get(url + "/health/live", timeout=2.0, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def _proc_sample(pid: int) -> dict | None:
    """The frontend's RSS (MiB), threads and open file descriptors, from /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"rss_mib": round(int(fields["VmRSS"].split()[0]) / 1024, 1), "threads": int(fields["Threads"]), "fds": fds}


# --- clients ----------------------------------------------------------------------------------------------

class _Clients:
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


# --- faults -----------------------------------------------------------------------------------------------

async def _faults(stack: SoakStack, settings: SoakSettings, started: float, stop_at: float, log: list[dict],
                  say: Callable[[str], None]) -> None:
    k = 0
    # the last fault ends a fault period before the soak does: the report needs that long to see drafting back
    while (at := started + (k + 1) * settings.fault_every_s) + settings.hold_s + settings.fault_every_s <= stop_at:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        role, kind = ROLES[k % len(ROLES)], FAULTS[k % len(FAULTS)]
        child = stack.sims[role]
        event = {"t_s": round(time.monotonic() - started, 1), "role": role, "kind": kind, "hold_s": settings.hold_s}
        say(f"{event['t_s']:.0f} s: {kind} the {role} server for {settings.hold_s:g} s")
        if kind == "kill":
            child.signal(signal.SIGKILL)
            await asyncio.to_thread(child.proc.wait)
            try:
                await asyncio.sleep(settings.hold_s)
            finally:
                back = time.monotonic()
                await asyncio.to_thread(stack.restart, role)
                event["restart_s"] = round(time.monotonic() - back, 2)
        else:
            child.signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(settings.hold_s)
            finally:
                child.signal(signal.SIGCONT)
        log.append(event)
        k += 1


async def _sampler(pid: int, started: float, samples: list[dict], done: asyncio.Event) -> None:
    while True:
        sample = _proc_sample(pid)
        if sample is not None:
            samples.append({"t_s": round(time.monotonic() - started, 1), **sample})
        try:
            await asyncio.wait_for(done.wait(), SAMPLE_EVERY_S)
            return
        except TimeoutError:
            pass


async def _drive(stack: SoakStack, settings: SoakSettings, say: Callable[[str], None]) -> dict:
    started = time.monotonic()
    stop_at = started + settings.duration_s
    clients = _Clients(stack.url, settings, started)
    faults: list[dict] = []
    samples: list[dict] = []
    done = asyncio.Event()
    sampler = asyncio.create_task(_sampler(stack.frontend.proc.pid, started, samples, done))
    injector = asyncio.create_task(_faults(stack, settings, started, stop_at, faults, say))

    async def minutes() -> None:  # a line a minute, so a long soak shows it is alive
        while True:
            await asyncio.sleep(WINDOW_S)
            out = clients.outcomes
            lost = sum(o.status == "lost" for o in out)
            rss = f", RSS {samples[-1]['rss_mib']:.0f} MiB" if samples else ""
            say(f"{clients.now():.0f} s: {len(out)} requests, {sum(o.status == '200' for o in out)} answered, "
                f"{lost} lost{rss}")

    ticker = asyncio.create_task(minutes())
    try:
        await asyncio.gather(*(clients.run(i, stop_at) for i in range(settings.clients)))
        await injector  # a fault still held ends first: every server is back
        final = await _final_check(clients)
    finally:
        ticker.cancel()
        injector.cancel()
        done.set()
        await sampler
        await clients.close()
    wall = time.monotonic() - started
    return _report(settings, clients.outcomes, faults, samples, final, wall)


async def _final_check(clients: _Clients) -> dict:
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


# --- the report -------------------------------------------------------------------------------------------

def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _counts(outcomes: list[Outcome]) -> dict:
    errors: dict[str, int] = {}
    for o in outcomes:
        if o.status not in ("200", "left", "lost"):
            errors[o.status] = errors.get(o.status, 0) + 1
    return {
        "sent": len(outcomes),
        "answered": sum(o.status == "200" for o in outcomes),
        "degraded": sum(o.degraded for o in outcomes),
        "drafted": sum(o.drafted for o in outcomes),
        "left_on_purpose": sum(o.status == "left" for o in outcomes),
        "errors": dict(sorted(errors.items())),
        "lost": sum(o.status == "lost" for o in outcomes),
    }


def _report(settings: SoakSettings, outcomes: list[Outcome], faults: list[dict], samples: list[dict], final: dict,
            wall_s: float) -> dict:
    windows = max(1, int(-(-wall_s // WINDOW_S)))
    minutes = []
    for w in range(windows):
        lo, hi = w * WINDOW_S, (w + 1) * WINDOW_S
        inside = [o for o in outcomes if lo <= o.end_s < hi or (w == windows - 1 and o.end_s >= hi)]
        latencies = [o.latency_s for o in inside if o.status == "200"]
        sampled = [s for s in samples if lo <= s["t_s"] < hi or (w == windows - 1 and s["t_s"] >= hi)]
        counts = _counts(inside)
        minutes.append({
            "minute": w + 1, "sent": counts["sent"], "answered": counts["answered"], "drafted": counts["drafted"],
            "degraded": counts["degraded"],
            "errors": sum(counts["errors"].values()), "lost": counts["lost"],
            "p50_s": _rounded(percentile(latencies, 0.5), 3), "p99_s": _rounded(percentile(latencies, 0.99), 3),
            "rss_mib": _rounded(max((s["rss_mib"] for s in sampled), default=None), 1),
            "threads": max((s["threads"] for s in sampled), default=None),
            "fds": max((s["fds"] for s in sampled), default=None),
        })
    by_kind: dict[str, dict[str, int]] = {}
    for o in outcomes:
        row = by_kind.setdefault(o.kind, {})
        row[o.status] = row.get(o.status, 0) + 1
    lost = [o for o in outcomes if o.status == "lost"]
    totals = _counts(outcomes)
    drafting = _drafting_recovery(outcomes, faults, settings.hold_s, wall_s)
    passed = (totals["lost"] == 0 and totals["errors"].get("500", 0) == 0 and final.get("status") == 200
              and drafting["back"] is not False)
    rss = [s["rss_mib"] for s in samples]
    return {
        "passed": passed,
        "settings": {**settings.model_dump(), "hold_s": settings.hold_s,
                     "request_timeout_s": settings.request_timeout_s, "client_timeout_s": settings.client_timeout_s,
                     "max_body_bytes": MAX_BODY_BYTES},
        "wall_s": round(wall_s, 1),
        "requests": totals,
        "by_kind": {k: dict(sorted(v.items())) for k, v in sorted(by_kind.items())},
        "lost": [{"t_s": round(o.end_s, 1), "kind": o.kind, "why": o.detail} for o in lost[:50]],
        "unexpected_statuses": sorted({o.unexpected for o in outcomes if o.unexpected}),
        "unshaped_errors": sorted({o.detail for o in outcomes if o.detail.startswith("an error not in")})[:20],
        "faults": faults,
        "drafting": drafting,
        "minutes": minutes,
        "frontend": {"rss_first_mib": rss[0] if rss else None, "rss_last_mib": rss[-1] if rss else None,
                     "rss_max_mib": max(rss, default=None), "samples": samples},
        "final_request": final,
    }


def _drafting_recovery(outcomes: list[Outcome], faults: list[dict], hold_s: float, wall_s: float) -> dict:
    """Drafted answers per minute before the first fault and after the last one (from RECOVERY_SETTLE_S
    after it ended), and whether the second came back to DRAFTING_BACK of the first (None: no fault, or
    too little time before or after the faults to tell)."""
    def per_minute(lo: float, hi: float) -> float | None:
        if hi - lo < RECOVERY_MIN_S:
            return None
        return 60.0 * sum(o.drafted for o in outcomes if lo <= o.end_s < hi) / (hi - lo)

    before = per_minute(0.0, min((f["t_s"] for f in faults), default=wall_s))
    after = per_minute(max(f["t_s"] for f in faults) + hold_s + RECOVERY_SETTLE_S, wall_s) if faults else None
    back = None if before is None or after is None else after >= DRAFTING_BACK * before
    return {"before_faults_per_minute": _rounded(before, 1), "after_faults_per_minute": _rounded(after, 1),
            "back": back}


def run_soak(settings: SoakSettings, log_dir: Path | None = None, say: Callable[[str], None] = lambda _: None) -> dict:
    """Start the stack, drive it for `settings.duration_s`, stop it; the report (see the module docstring).

    The processes' logs go to `log_dir` (a temporary folder without one, removed when the soak passed).
    """
    keep = log_dir is not None
    folder = log_dir or Path(tempfile.mkdtemp(prefix="lookahead-soak-"))
    with SoakStack(settings, folder) as stack:
        say(f"lookahead serve on {stack.url} over simulated servers; {settings.clients} clients for "
            f"{settings.duration_s:g} s, a fault every {settings.fault_every_s:g} s")
        report = asyncio.run(_drive(stack, settings, say))
        exited = stack.frontend.proc.poll()
    log = (folder / "serve.log").read_text(errors="replace")
    report["frontend"] |= {"exit_code": exited, "tracebacks": len(re.findall(r"^Traceback", log, re.M)),
                           "log": str(folder / "serve.log") if keep or not report["passed"] else None}
    if exited is not None:
        report["passed"] = False
    if not keep and report["passed"]:
        shutil.rmtree(folder, ignore_errors=True)
    return report


def soak_tables(report: dict):
    """Rich tables: the totals (with the faults) and one row a minute."""
    from rich.table import Table

    r = report["requests"]
    totals = Table(title="bench soak: lookahead serve over simulated servers, with faults")
    for column in ("sent", "answered (200)", "drafted", "degraded", "left on purpose", "errors by status", "lost"):
        totals.add_column(column, justify="right")
    errors = ", ".join(f"{code}: {n}" for code, n in r["errors"].items()) or "none"
    totals.add_row(str(r["sent"]), str(r["answered"]), str(r["drafted"]), str(r["degraded"]),
                   str(r["left_on_purpose"]), errors, str(r["lost"]))
    per_minute = Table(title="per minute (latency of answers; the frontend's peak RSS, threads and open files)")
    for column in ("minute", "sent", "answered", "drafted", "degraded", "errors", "lost", "p50 s", "p99 s",
                   "RSS MiB", "threads", "fds"):
        per_minute.add_column(column, justify="right")

    def fmt(value, spec=".2f") -> str:
        return "n/a" if value is None else format(value, spec)

    for m in report["minutes"]:
        per_minute.add_row(str(m["minute"]), str(m["sent"]), str(m["answered"]), str(m["drafted"]), str(m["degraded"]),
                           str(m["errors"]),
                           str(m["lost"]), fmt(m["p50_s"]), fmt(m["p99_s"]), fmt(m["rss_mib"], ".0f"),
                           fmt(m["threads"], "d"), fmt(m["fds"], "d"))
    return totals, per_minute


def soak_summary(report: dict) -> list[str]:
    """Lines under the tables: the faults, what went wrong, the verdict."""
    faults = ", ".join(f"{f['kind']} {f['role']} at {f['t_s']:.0f} s" for f in report["faults"])
    lines = [f"faults ({report['settings']['hold_s']:g} s each): {faults}" if faults else "faults: none"]
    final = report["final_request"]
    lines.append(f"after the last fault: a request got {final.get('status')}"
                 + (" (degraded)" if final.get("degraded") else ""))
    fe = report["frontend"]
    if fe.get("tracebacks"):
        lines.append(f"the frontend logged {fe['tracebacks']} traceback(s): {fe.get('log')}")
    if fe.get("exit_code") is not None:
        lines.append(f"the frontend exited with code {fe['exit_code']} during the soak")
    for entry in report["lost"][:10]:
        lines.append(f"lost at {entry['t_s']:.0f} s ({entry['kind']}): {entry['why']}")
    for entry in report["unexpected_statuses"][:10]:
        lines.append(f"hostile request answered otherwise: {entry}")
    drafting = report["drafting"]
    if drafting["back"] is None:
        lines.append("drafting after the faults: too short a soak to tell")
    else:
        lines.append(f"drafted answers per minute: {drafting['before_faults_per_minute']:g} before the faults, "
                     f"{drafting['after_faults_per_minute']:g} after the last"
                     + ("" if drafting["back"] else f" (FAILED: under {DRAFTING_BACK:.0%})"))
    r = report["requests"]
    verdict = "passed" if report["passed"] else "FAILED"
    lines.append(f"{verdict}: {r['lost']} lost, {r['errors'].get('500', 0)} × 500")
    return lines
