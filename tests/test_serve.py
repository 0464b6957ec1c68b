"""`lookahead serve`: the OpenAI-compatible frontend, over simulated SGLang servers.

(The official `openai` client against real CPU SGLang servers is in test_serve_real.py.)
"""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from lookahead_reasoning.eval.simserver import SimConfig, SimServerThread
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.servers.connection import Connection
from lookahead_reasoning.runtime.servers.endpoints import ServerAddress, Endpoints
from lookahead_reasoning.runtime.servers.processes import UvicornThread, free_port
from lookahead_reasoning.runtime.serve import ServeSettings, build_app
from lookahead_reasoning.runtime.serve.health import CACHE_S

STEPS = 5


def sim_endpoints(sims) -> Endpoints:
    return Endpoints(**{r: ServerAddress(url=s.url, chat_template="chatml") for r, s in sims.items()})


class Frontend(UvicornThread):
    """`build_app` served by uvicorn on loopback in a thread."""

    def __init__(self, endpoints: Endpoints, settings: ServeSettings, config: LookaheadConfig | None = None):
        config = config or LookaheadConfig(depth=2, max_tokens=500, request_timeout_s=5)
        super().__init__(build_app(Connection(endpoints, config), config, settings))

    def chat(self, content="What is two and three?", **extra):
        body = {"model": "lookahead", "messages": [{"role": "user", "content": content}], **extra}
        return requests.post(self.url + "/v1/chat/completions", json=body, timeout=60)


def make_sims(decode_ms=1.0, steps=STEPS):
    return {
        "draft": SimServerThread(SimConfig(role="draft", decode_ms=decode_ms / 4, steps=steps, step_tokens=5)),
        "target": SimServerThread(SimConfig(role="target", decode_ms=decode_ms, steps=steps, step_tokens=5)),
        "judge": SimServerThread(SimConfig(role="judge", decode_ms=decode_ms / 2, alpha=0.6)),
    }


@pytest.fixture(scope="module")
def sims():
    servers = make_sims()
    for s in servers.values():
        s.__enter__()
    yield servers
    for s in servers.values():
        s.__exit__()


@pytest.fixture(autouse=True)
def healthy(sims):
    yield
    for s in sims.values():
        s.engine.state.fault = "ok"


@pytest.fixture(scope="module")
def frontend(sims):
    with Frontend(sim_endpoints(sims), ServeSettings(max_concurrent=8, max_tokens_cap=1000)) as f:
        yield f


def events(response) -> list:
    out = []
    for line in response.iter_lines(decode_unicode=True):
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_models_and_health(frontend, sims):
    ids = [m["id"] for m in requests.get(frontend.url + "/v1/models").json()["data"]]
    assert ids == ["lookahead", "target"]
    assert requests.get(frontend.url + "/health").json()["status"] == "ok"
    sims["judge"].engine.state.fault = "fail"
    time.sleep(CACHE_S + 0.1)  # readiness answers are cached this long
    res = requests.get(frontend.url + "/health")
    assert res.status_code == 503 and res.json()["servers"]["judge"] == "unreachable"
    assert requests.get(frontend.url + "/health/live").json() == {"status": "ok"}  # liveness asks no server


def test_chat_completion_shape_usage_and_statistics(frontend):
    res = frontend.chat()
    assert res.status_code == 200
    body = res.json()
    assert body["object"] == "chat.completion" and body["model"] == "lookahead"
    [choice] = body["choices"]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "stop"
    assert choice["message"]["content"].count("\n\n") == STEPS - 1
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    stats = body["lookahead"]
    assert stats["rounds"] >= 1 and 0 <= stats["acceptance_rate"] <= 1
    assert stats["draft_steps_kept"] + stats["target_steps_kept"] == STEPS


def test_ar_model_behind_the_same_server(frontend):
    lr = frontend.chat().json()
    ar = frontend.chat(model="target").json()
    assert ar["lookahead"]["mode"] == "ar"
    assert ar["choices"][0]["message"]["content"].count("\n\n") == STEPS - 1
    assert lr["usage"]["prompt_tokens"] == ar["usage"]["prompt_tokens"]


def test_text_completion(frontend):
    res = requests.post(frontend.url + "/v1/completions", json={"prompt": "<|im_start|>assistant\n", "max_tokens": 40})
    body = res.json()
    assert res.status_code == 200 and body["object"] == "text_completion"
    assert body["choices"][0]["text"].startswith("s0-")


def test_streaming_sends_each_kept_step_then_done(frontend):
    whole = frontend.chat().json()["choices"][0]["message"]["content"]
    with requests.post(frontend.url + "/v1/chat/completions", stream=True, timeout=60, json={
        "messages": [{"role": "user", "content": "What is two and three?"}], "stream": True}) as res:
        assert res.status_code == 200 and res.headers["content-type"].startswith("text/event-stream")
        got = events(res)
    assert got[-1] == "[DONE]"
    chunks = got[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    pieces = [c["choices"][0]["delta"].get("content", "") for c in chunks]
    assert len([p for p in pieces if p]) == STEPS  # one chunk per kept step
    assert "".join(pieces) == whole
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and "lookahead" in chunks[-1]


@pytest.mark.parametrize("body", [
    b"{not json",
    b"[1, 2]",
    json.dumps({"messages": []}).encode(),
    json.dumps({"messages": [{"role": "user", "content": "q"}], "max_tokens": 0}).encode(),
    json.dumps({"messages": [{"role": "user", "content": "q"}], "max_tokens": 5000}).encode(),
    json.dumps({"messages": [{"role": "user", "content": "q"}], "temperature": "hot"}).encode(),
    json.dumps({"messages": [{"role": "wizard", "content": "q"}]}).encode(),
    json.dumps({"messages": "hello"}).encode(),
    json.dumps({"messages": [{"role": "user", "content": "q"}], "stream": "yes"}).encode(),
    json.dumps({"messages": [{"role": "user", "content": "q"}], "max_tokens": "12"}).encode(),
    json.dumps({"messages": [{"role": "user", "content": "q"}], "n": 3}).encode(),
])
def test_bad_requests_get_openai_style_400s(frontend, body):
    res = requests.post(frontend.url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    assert res.status_code == 400, res.text
    error = res.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]


def test_unknown_model_and_ignored_extra_fields(frontend):
    assert frontend.chat(model="gpt-17").status_code == 404
    assert frontend.chat(user="me").status_code == 200  # OpenAI fields that change nothing here are accepted
    refused = frontend.chat(logit_bias={"1": 2}, user="me")  # one that would change the output is not ignored
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "logit_bias"


def test_sampling_settings_reach_the_servers(frontend, sims):
    assert frontend.chat(temperature=0.7, top_p=0.9).status_code == 200
    seen = requests.get(sims["target"].url + "/sim/stats").json()["last_sampling"]
    assert seen["temperature"] == 0.7 and seen["top_p"] == 0.9


def test_target_down_is_a_503(frontend, sims):
    sims["target"].engine.state.fault = "fail"
    res = frontend.chat()
    assert res.status_code == 503 and "downstream" in res.json()["error"]["message"]


def test_draft_down_completes_with_target_steps_and_says_so(frontend, sims):
    sims["draft"].engine.state.fault = "fail"
    body = frontend.chat().json()
    assert body["choices"][0]["message"]["content"].count("\n\n") == STEPS - 1
    assert body["lookahead"]["degraded"] and body["lookahead"]["target_steps_kept"] == STEPS


def test_concurrent_requests_are_isolated(frontend):
    prompts = [f"<|im_start|>assistant\n{'x' * i}" + "\n\n" * i for i in range(4)]

    def complete(prompt):
        return requests.post(frontend.url + "/v1/completions", json={"prompt": prompt}).json()["choices"][0]["text"]

    alone = [complete(p) for p in prompts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(complete, prompts))
    assert together == alone
    assert [t.split("-")[0] for t in alone] == ["s0", "s1", "s2", "s3"]  # each continues its own prompt


def test_metrics_in_prometheus_format(frontend):
    frontend.chat()
    text = requests.get(frontend.url + "/metrics").text
    for name in ("lookahead_requests_total", "lookahead_request_latency_seconds", "lookahead_acceptance_rate",
                 "lookahead_steps_per_round"):
        assert name in text


def test_api_key_is_required_when_set(sims):
    with Frontend(sim_endpoints(sims), ServeSettings(api_key="s3cret")) as f:
        assert f.chat().status_code == 401
        bad = requests.post(f.url + "/v1/chat/completions", headers={"Authorization": "Bearer nope"},
                            json={"messages": [{"role": "user", "content": "q"}]})
        assert bad.status_code == 401 and bad.json()["error"]["type"] == "authentication_error"
        good = requests.post(f.url + "/v1/chat/completions", headers={"Authorization": "Bearer s3cret"},
                             json={"messages": [{"role": "user", "content": "q"}]})
        assert good.status_code == 200


def test_excess_requests_wait_then_get_429_and_slow_ones_504():
    slow = make_sims(decode_ms=40.0)  # a request takes about a second
    for s in slow.values():
        s.__enter__()
    try:
        with Frontend(sim_endpoints(slow), ServeSettings(max_concurrent=1, queue_timeout_s=0.3)) as f:
            with ThreadPoolExecutor(3) as pool:
                codes = sorted(pool.map(lambda _: f.chat().status_code, range(3)))
            assert codes[0] == 200 and 429 in codes
        with Frontend(sim_endpoints(slow), ServeSettings(request_timeout_s=0.3)) as f:
            res = f.chat()
            assert res.status_code == 504 and res.json()["error"]["type"] == "timeout_error"
    finally:
        for s in slow.values():
            s.__exit__()


def test_draft_server_stopped_mid_stream_degrades():
    servers = make_sims(decode_ms=20.0, steps=16)
    for s in servers.values():
        s.__enter__()
    try:
        with Frontend(sim_endpoints(servers), ServeSettings()) as f:
            with requests.post(f.url + "/v1/chat/completions", stream=True, timeout=60, json={
                "messages": [{"role": "user", "content": "q"}], "stream": True}) as res:
                lines = res.iter_lines(decode_unicode=True)
                got = []
                for line in lines:
                    if line.startswith("data: ") and "content" in line:
                        servers["draft"].__exit__()  # the draft server goes away after the first step
                        got.append(json.loads(line[6:]))
                        break
                got += [json.loads(l[6:]) if l != "data: [DONE]" else "[DONE]" for l in lines if l.startswith("data: ")]
        assert got[-1] == "[DONE]"
        final = got[-2]
        assert final["choices"][0]["finish_reason"] == "stop"
        assert final["lookahead"]["degraded"]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in got[:-1])
        assert text.count("\n\n") == 16 - 1  # the answer is still complete
    finally:
        for role in ("target", "judge"):
            servers[role].__exit__()


def test_a_client_that_leaves_mid_stream_frees_its_slot():
    servers = make_sims(decode_ms=20.0, steps=10)
    for s in servers.values():
        s.__enter__()
    try:
        with Frontend(sim_endpoints(servers), ServeSettings(max_concurrent=1, queue_timeout_s=5)) as f:
            for _ in range(3):  # with one slot, each of these needs the previous one's slot back
                with requests.post(f.url + "/v1/chat/completions", stream=True, timeout=30, json={
                        "messages": [{"role": "user", "content": "q"}], "stream": True}) as res:
                    assert res.status_code == 200
                    next(res.iter_lines())
            assert f.chat().status_code == 200
    finally:
        for s in servers.values():
            s.__exit__()


def test_serve_command_starts_on_loopback_and_refuses_a_busy_port(sims):
    import os
    import signal
    import subprocess
    import sys

    port = free_port()
    cli = [sys.executable, "-m", "lookahead_reasoning.cli", "serve", "--draft-url", sims["draft"].url,
           "--target-url", sims["target"].url, "--judge-url", sims["judge"].url, "--chat-template", "chatml"]
    proc = subprocess.Popen([*cli, "--port", str(port)], stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
            time.sleep(0.3)
        res = requests.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                            json={"messages": [{"role": "user", "content": "q"}]})
        assert res.status_code == 200
        busy = subprocess.run([*cli, "--port", str(port)], capture_output=True, text=True, timeout=60)
        assert busy.returncode == 1 and "already in use" in busy.stderr
        beyond = subprocess.run([*cli, "--port", str(free_port()), "--host", "0.0.0.0"], capture_output=True,
                                text=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "LOOKAHEAD_API_KEY"})
        assert beyond.returncode == 1 and "API key" in beyond.stderr
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


def test_health_names_the_roles_the_launcher_is_restarting(sims, tmp_path):
    endpoints_file = tmp_path / "endpoints.json"
    endpoints = sim_endpoints(sims)
    endpoints_file.write_text(endpoints.model_copy(update={"restarting": ["draft"]}).model_dump_json())
    with Frontend(endpoints, ServeSettings(endpoints_file=endpoints_file)) as frontend:
        body = requests.get(frontend.url + "/health").json()
        assert body["servers"] == {"draft": "restarting", "target": "ok", "judge": "ok"}
        assert body["status"] == "degraded"
        endpoints_file.write_text(endpoints.model_dump_json())  # the launcher has the draft back
        time.sleep(CACHE_S + 0.1)
        assert requests.get(frontend.url + "/health").json()["status"] == "ok"
