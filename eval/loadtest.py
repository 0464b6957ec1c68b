"""`lookahead bench serve`: concurrent requests against `lookahead serve`, LR and AR.

Without `--url` it starts everything itself on loopback: three simulated SGLang
servers (GPU-like timing, see simserver.py) and the frontend in this process, so the
figures are reproducible on any machine. With `--url` it loads a running frontend,
which must be on loopback. The number of requests and the time are bounded.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import requests

from lookahead_reasoning.errors import LookaheadError

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def load(url: str, model: str, n: int, concurrency: int, max_tokens: int, api_key: str | None,
         timeout_s: float) -> dict:
    """Send `n` chat requests, `concurrency` at a time; report throughput, latency and statuses."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    latencies: list[float] = []
    tokens: list[int] = []
    statuses: dict[str, int] = {}
    lock = threading.Lock()
    deadline = time.monotonic() + timeout_s

    def one(i: int) -> None:
        if time.monotonic() > deadline:
            status = "skipped"
        else:
            body = {"model": model, "max_tokens": max_tokens,
                    "messages": [{"role": "user", "content": f"Problem {i}: how many steps does it take?"}]}
            t0 = time.perf_counter()
            try:
                res = requests.post(url + "/v1/chat/completions", json=body, headers=headers,
                                    timeout=max(1.0, deadline - time.monotonic()))
                status = str(res.status_code)
                if res.ok:
                    with lock:
                        latencies.append(time.perf_counter() - t0)
                        tokens.append(res.json()["usage"]["completion_tokens"])
            except requests.RequestException:
                status = "no answer"
        with lock:
            statuses[status] = statuses.get(status, 0) + 1

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(one, range(n)))
    wall = time.perf_counter() - started
    return {
        "model": model, "requests": n, "concurrency": concurrency, "wall_s": wall,
        "completed": len(latencies), "statuses": statuses,
        "requests_per_s": len(latencies) / wall, "tokens_per_s": sum(tokens) / wall,
        "p50_latency_s": percentile(latencies, 0.5), "p99_latency_s": percentile(latencies, 0.99),
        "median_latency_s": statistics.median(latencies) if latencies else None,
    }


def check_loopback(url: str) -> str:
    host = urlparse(url).hostname
    if host not in LOOPBACK:
        raise LookaheadError(f"bench serve only loads a frontend on loopback, not {host!r}")
    return url.rstrip("/")


class LocalStack:
    """Simulated servers and the frontend, all on loopback, for a self-contained load check."""

    def __init__(self, max_concurrent: int, queue_timeout_s: float, engine: str):
        self.max_concurrent, self.queue_timeout_s, self.engine = max_concurrent, queue_timeout_s, engine

    def __enter__(self) -> str:
        from lookahead_reasoning.eval.simcluster import LatencyModel, SimCluster
        from lookahead_reasoning.runtime.config import LookaheadConfig
        from lookahead_reasoning.runtime.servers.connection import Connection
        from lookahead_reasoning.runtime.servers.processes import UvicornThread
        from lookahead_reasoning.runtime.serve import ServeSettings, build_app

        self.cluster = SimCluster(LatencyModel()).__enter__()
        try:
            self.cluster.configure(alpha=0.7, c=0.1)
            config = LookaheadConfig(depth=4, engine=self.engine, max_tokens=4096, max_step_tokens=24)
            settings = ServeSettings(max_concurrent=self.max_concurrent, queue_timeout_s=self.queue_timeout_s)
            app = build_app(Connection(self.cluster.endpoints(), config), config, settings)
            self.server = UvicornThread(app).__enter__()
        except BaseException:
            self.cluster.__exit__()
            raise
        return self.server.url

    def __exit__(self, *exc) -> None:
        self.server.__exit__()
        self.cluster.__exit__()
