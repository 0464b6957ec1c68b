"""`lookahead serve` shares one adaptive policy and cost model across its requests: it backs off
toward AR when branches stop being free, and drafts again when they are free again."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from lookahead_reasoning.runtime.adaptive import probes
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.servers.connection import Connection
from lookahead_reasoning.runtime.servers.processes import UvicornThread
from lookahead_reasoning.runtime.serve import ServeSettings, build_app

SIM = {"steps": 8, "step_tokens": 6}


def _set_slope(sims, slope: float) -> None:
    for server in (sims.draft, sims.target, sims.judge):
        server.engine.reconfigure(server.engine.state.config.model_copy(update={"batch_slope": slope}))


def _ask(url: str, n: int = 1, concurrency: int = 1) -> None:
    body = {"model": "lookahead", "messages": [{"role": "user", "content": "What is two and three?"}]}

    def one(_):
        res = requests.post(url + "/v1/chat/completions", json=body, timeout=120)
        assert res.status_code == 200, res.text

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(n)))


@pytest.mark.slow  # one to two and a half minutes: the policy must see a load come and go
def test_serve_backs_off_under_load_and_drafts_again_when_it_falls(sim_servers, monkeypatch):
    # probes may cost 10 % of the time, not 2 %: the same schedule five times denser, so that seeing a load come
    # and go takes tens of requests, not hundreds (minutes on a 2-core machine)
    monkeypatch.setattr(probes, "PROBE_BUDGET", 0.1)
    # slow enough that the simulated timing, not the test machine, decides what a branch costs
    with sim_servers(draft={"decode_ms": 2.0, **SIM}, target={"decode_ms": 25.0, **SIM},
                     judge={"decode_ms": 4.0, "alpha": 0.9}) as sims:
        config = LookaheadConfig(adaptive_depth=True, depth=2, max_tokens=400, max_step_tokens=12)
        app = build_app(Connection(sims.endpoints(), config), config, ServeSettings(max_concurrent=4))
        policy = app.state.service.policy
        with UvicornThread(app) as frontend:
            # batches are free: the shared model learns that (a probe, a one-step draft), and drafts, usually after
            # the first request. A noisy probe, or drafting rounds that measure slower than AR rounds on a shared
            # machine, can keep it at AR for a while; the next probes are what recover it, so the loop allows them
            for _ in range(100):
                _ask(frontend.url)
                if policy.cost_estimate().planned_depth >= 1:
                    break
            assert policy.cost_estimate().planned_depth >= 1

            _set_slope(sims, 1.0)  # load: every extra concurrent request costs as much as one more
            for _ in range(12):
                _ask(frontend.url, n=4, concurrency=4)
                if policy.cost_estimate().planned_depth == 0:
                    break
            assert policy.cost_estimate().planned_depth == 0
            assert policy.costs.estimate().branch_slope > 0.2  # the server no longer batches for free

            _set_slope(sims, 0.0)  # the load is gone: the probes see it, and the requests draft again
            # the probes are spaced by their budget, and the slow fit keeps the loaded requests (far out in load, so
            # they weigh on the slope long after they fade): seeing the load gone takes many requests (a run's
            # first round is never a probe)
            for _ in range(400):
                _ask(frontend.url)
                if policy.cost_estimate().planned_depth >= 1:
                    break
            assert policy.cost_estimate().planned_depth >= 1
