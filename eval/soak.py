"""`lookahead bench soak`: a long load test with faults, for what single requests cannot find.

It starts three simulated SGLang servers (eval/simserver.py) and `lookahead serve` in front of
them, each as a process of its own, then runs `clients` concurrent clients for `duration_s`.
Each client sends, one after another: plain and streaming chat completions for both models
(`lookahead` and `target`), a few text completions, streams it hangs up on after the first
events, and hostile requests (malformed JSON, wrong types, huge `max_tokens`, lone surrogates,
deep nesting, unknown fields, bodies over the limit, ...; `soak_clients.HOSTILE`). Every `fault_every_s`
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

Here the settings and the run; the processes and faults are in soak_stack.py, the clients in
soak_clients.py, the report in soak_report.py.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, Field

from lookahead_reasoning.eval.soak_clients import Clients, final_check
from lookahead_reasoning.eval.soak_report import WINDOW_S, build_report
from lookahead_reasoning.eval.soak_stack import SoakStack, inject_faults, sample_frontend


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


async def _drive(stack: SoakStack, settings: SoakSettings, say: Callable[[str], None]) -> dict:
    started = time.monotonic()
    stop_at = started + settings.duration_s
    clients = Clients(stack.url, settings, started)
    faults: list[dict] = []
    samples: list[dict] = []
    done = asyncio.Event()
    sampler = asyncio.create_task(sample_frontend(stack.frontend.proc.pid, started, samples, done))
    injector = asyncio.create_task(inject_faults(stack, settings, started, stop_at, faults, say))

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
        final = await final_check(clients)
    finally:
        ticker.cancel()
        injector.cancel()
        done.set()
        await sampler
        await clients.close()
    wall = time.monotonic() - started
    return build_report(settings, clients.outcomes, faults, samples, final, wall)


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
