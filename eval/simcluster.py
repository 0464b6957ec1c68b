"""Three simulated SGLang servers (eval/simserver.py), each in a process of its own, with the latencies of a
GPU deployment: what `lookahead bench sim|load|serve` and `sweep --sim` run against."""

from __future__ import annotations

import subprocess
import sys

import requests
from pydantic import BaseModel, Field

from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.runtime.servers.endpoints import Endpoints, ServerAddress
from lookahead_reasoning.runtime.servers.processes import answers, dies_with_parent, free_port, stop_group, wait_until

JUDGE_TICKS = 2  # a judge answer is one token, then EOS
START_TIMEOUT_S = 60.0


class LatencyModel(BaseModel):
    target_decode_ms: float = Field(20.0, gt=0, description="a 32B-class target on a GPU: about 20 ms per token")
    judge_decode_ms: float = Field(10.0, gt=0, description="a 7B-class judge")
    step_tokens: int = Field(16, ge=2)
    steps: int = Field(12, ge=2)
    problems: int = Field(2, ge=1)
    question_words: int = Field(120, ge=1, description="length of each simulated question")

    def judge_cost(self) -> float:
        """j: judge time per round / target time per step (one step = step_tokens + the delimiter)."""
        return JUDGE_TICKS * self.judge_decode_ms / ((self.step_tokens + 1) * self.target_decode_ms)


class SimCluster:
    """Three simulated servers in their own processes; stopped by process group."""

    def __init__(self, latency: LatencyModel, seed: int = 0):
        self.latency = latency
        self.procs: dict[str, subprocess.Popen] = {}
        self.urls: dict[str, str] = {}
        self.seed = seed

    def __enter__(self) -> SimCluster:
        try:
            for role in ("draft", "target", "judge"):
                port = free_port()
                self.procs[role] = subprocess.Popen(
                    dies_with_parent([sys.executable, "-m", "lookahead_reasoning.cli", "simserver", "--role", role,
                                      "--port", str(port)]),
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                )
                self.urls[role] = f"http://127.0.0.1:{port}"
            for role, url in self.urls.items():  # they start together, so the later ones wait little
                proc = self.procs[role]
                try:
                    wait_until(lambda: answers(url), lambda: proc.poll() is None, START_TIMEOUT_S,
                               f"simulated {role} server")
                except RuntimeError as error:
                    raise LookaheadError(str(error)) from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs.values():
            stop_group(proc, grace_s=10)

    def configure(
        self, alpha: float, c: float, alpha_schedule: list[tuple[int, float]] | None = None, batch_slope: float = 0.0
    ) -> None:
        """α of the judge, c of the draft, and `batch_slope` of every server (0: batches are free; 1: linear)."""
        lat = self.latency
        common = {"step_tokens": lat.step_tokens, "steps": lat.steps, "seed": self.seed, "batch_slope": batch_slope}
        settings = {
            "draft": {**common, "decode_ms": c * lat.target_decode_ms},
            "target": {**common, "decode_ms": lat.target_decode_ms},
            "judge": {**common, "decode_ms": lat.judge_decode_ms, "alpha": alpha,
                      "alpha_schedule": alpha_schedule or []},
        }
        for role, body in settings.items():
            res = requests.post(self.urls[role] + "/sim/config", json=body, timeout=10)
            if not res.ok:
                raise LookaheadError(f"simulated {role} server refused its settings: {res.text}")

    def endpoints(self) -> Endpoints:
        return Endpoints(**{r: ServerAddress(url=u, chat_template="chatml") for r, u in self.urls.items()})
