"""`lookahead serve`'s thread pools end with its app: a process that starts and stops frontends keeps no
idle request or health threads of the frontends it stopped."""

import threading
import time

import requests

from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.serve import ServeSettings, build_app
from lookahead_reasoning.runtime.servers.connection import Connection
from lookahead_reasoning.runtime.servers.processes import UvicornThread

CYCLES = 20
MARGIN = 3  # threads that may come and go on their own (an HTTP keep-alive, a timer)


def serve_once(endpoints) -> None:
    """Start a frontend, run a request in each of its pools (a lookahead answer and a readiness check), stop it."""
    config = LookaheadConfig(depth=2, max_tokens=200, request_timeout_s=10)
    app = build_app(Connection(endpoints, config), config, ServeSettings(max_concurrent=4))
    with UvicornThread(app) as frontend:
        body = {"model": "lookahead", "messages": [{"role": "user", "content": "What is two and three?"}]}
        assert requests.post(frontend.url + "/v1/chat/completions", json=body, timeout=30).status_code == 200
        assert requests.get(frontend.url + "/health", timeout=30).json()["status"] == "ok"


def settled_thread_count(target: int, within_s: float = 10.0) -> int:
    """The thread count once it is at most `target`, or whatever it is after `within_s` (finished work's
    threads leave on their own, a moment after their pool is shut down)."""
    end = time.monotonic() + within_s
    while threading.active_count() > target and time.monotonic() < end:
        time.sleep(0.05)
    return threading.active_count()


def test_starting_and_stopping_the_app_leaves_no_threads_behind(sim_servers):
    with sim_servers(draft={"decode_ms": 0.5, "steps": 3, "step_tokens": 4},
                     target={"decode_ms": 1.0, "steps": 3, "step_tokens": 4}, judge={"decode_ms": 0.5}) as sims:
        endpoints = sims.endpoints()
        serve_once(endpoints)  # what a first app starts once per process (imports, HTTP clients) is not a leak
        before = settled_thread_count(0, within_s=1.0)
        for _ in range(CYCLES):
            serve_once(endpoints)
        after = settled_thread_count(before + MARGIN)
        left = sorted(t.name for t in threading.enumerate())
        assert after <= before + MARGIN, f"{after - before} threads more after {CYCLES} apps: {left}"
