"""SGLang's router (`sglang-router`) in front of replicas: its command, and one run for a while.

The router is the real `sglang-router` package (the project's `router` extra), started as
`python -m sglang_router.launch_router --worker-urls ...`; the launcher supervises it like a server.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import requests
from lookahead_reasoning.runtime.servers.processes import (
    answers,
    dies_with_parent,
    free_port,
    stop_group,
)

from lookahead_reasoning.errors import LookaheadError

ROUTER_POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")

# Flags every router we start gets (before the user's --router-args, which may override them).
# A request that fails on a replica is retried (5 tries, 0.3 s then twice as long each time,
# 4.5 s in all) and each try is routed again; health checks every 2 s take a dead replica out
# after one failure, so the later tries go to the replicas that answer, and take it back after
# two good checks. The circuit breaker is off: sglang-router 0.3.2 counts a request's HTTP 4xx
# against its replica, so a few bad requests (a prompt over the context length) would shut
# healthy replicas out.
ROUTER_DEFAULT_ARGS = [
    "--disable-circuit-breaker",
    "--health-check-interval-secs", "2", "--health-failure-threshold", "1", "--health-success-threshold", "2",
    "--retry-initial-backoff-ms", "300", "--retry-backoff-multiplier", "2",
    "--shutdown-grace-period-secs", "5",
]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain_text(line: str) -> str:
    """A log line without terminal colours (the router colours its log)."""
    return _ANSI.sub("", line)


def router_command(worker_urls: list[str], port: int, policy: str = "cache_aware", metrics_port: int | None = None,
                   extra_args: list[str] | None = None) -> list[str]:
    """The exact command that starts SGLang's router (`sglang-router`) over `worker_urls` on 127.0.0.1:`port`."""
    return [
        sys.executable, "-m", "sglang_router.launch_router",
        "--worker-urls", *worker_urls,
        "--policy", policy,
        "--host", "127.0.0.1", "--port", str(port),
        # its Prometheus exporter binds 0.0.0.0:29000 unless told otherwise: two routers would collide
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port or free_port()),
        *ROUTER_DEFAULT_ARGS, *(extra_args or []),
    ]


def check_router_installed() -> None:
    if importlib.util.find_spec("sglang_router") is None:
        raise LookaheadError("replicas need SGLang's router: pip install sglang-router==0.3.2 (the project's router extra)")


def reachable(url: str, timeout_s: float = 5.0) -> bool:
    """Whether anything answers HTTP at `url` (any status: a router without healthy workers yet counts)."""
    try:
        requests.get(url + "/health", timeout=timeout_s)
        return True
    except requests.RequestException:
        return False


@contextmanager
def running_router(worker_urls: list[str], policy: str = "cache_aware", log_path: Path | None = None,
                   startup_timeout_s: float = 120.0, extra_args: list[str] | None = None) -> Iterator[str]:
    """A router over servers started elsewhere, for as long as the block runs; yields its URL."""
    check_router_installed()
    port = free_port()
    command = router_command(worker_urls, port, policy, extra_args=extra_args)
    log_path = log_path or Path(os.devnull)
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(dies_with_parent(command), stdout=log_file, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not answers(url, timeout_s=5):
            if process.poll() is not None:
                raise LookaheadError(f"the {policy} router exited during start-up (log {log_path})")
            if time.monotonic() > deadline:
                raise LookaheadError(f"the {policy} router did not start within {startup_timeout_s:g} s")
            time.sleep(0.5)
        yield url
    finally:
        stop_group(process, 20.0)
