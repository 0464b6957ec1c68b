"""The soak's process stack: three simulated SGLang servers and `lookahead serve`, each a process of its own
on a free port; the faults injected into the servers (kill or stall); the frontend's RSS, threads and open
files, sampled from /proc."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import httpx

from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.runtime.servers.processes import (
    answers, dies_with_parent, free_port, port_in_use, stop_group, wait_until,
)

if TYPE_CHECKING:
    from lookahead_reasoning.eval.soak import SoakSettings

ROLES = ("draft", "judge", "target")  # the order faults take
FAULTS = ("kill", "stall")
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


async def inject_faults(stack: SoakStack, settings: SoakSettings, started: float, stop_at: float, log: list[dict],
                        say: Callable[[str], None]) -> None:
    """Every `fault_every_s`, kill or stall the draft, judge and target server in turn for `hold_s`; each
    fault appended to `log`."""
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


async def sample_frontend(pid: int, started: float, samples: list[dict], done: asyncio.Event) -> None:
    """The frontend's RSS, threads and open files into `samples` every SAMPLE_EVERY_S, until `done`."""
    while True:
        sample = _proc_sample(pid)
        if sample is not None:
            samples.append({"t_s": round(time.monotonic() - started, 1), **sample})
        try:
            await asyncio.wait_for(done.wait(), SAMPLE_EVERY_S)
            return
        except TimeoutError:
            pass
