"""`lookahead serve` under hostile clients and failing servers: never a 500 for the client's input.

Limits on bodies, clients that leave, probes, stalled servers, deadlines, what errors reveal, and
broken calibration files; over simulated servers (eval/simserver.py) in threads of this process.
"""

import asyncio
import json
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from cli_invoke import invoke, one_line_error
from test_serve import STEPS, Frontend, make_sims, sim_endpoints

from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.servers.connection import Connection, role_timeouts
from lookahead_reasoning.runtime.servers.endpoints import ServerAddress, Endpoints
from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.runtime.servers.processes import free_port, port_in_use
from lookahead_reasoning.runtime.serve import ServeSettings, build_app
from lookahead_reasoning.runtime.serve.body import MAX_DEPTH, MAX_INT_DIGITS, nesting_depth
from lookahead_reasoning.runtime.serve.health import CACHE_S
from lookahead_reasoning.runtime.serve.jobs import Runner
from lookahead_reasoning.runtime.serve.schemas import APIError

LIMIT = 64 * 1024
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def shared_sims():
    sims = make_sims()
    for s in sims.values():
        s.__enter__()
    yield sims
    for s in sims.values():
        s.__exit__()


@pytest.fixture
def servers(shared_sims):
    yield shared_sims
    for s in shared_sims.values():
        s.engine.state.fault = "ok"


@pytest.fixture
def frontend(servers):
    with Frontend(sim_endpoints(servers), ServeSettings(max_body_bytes=LIMIT)) as f:
        yield f


def service_of(f: Frontend):
    return f.server.config.app.state.service


def assert_openai_error(res, status: int) -> dict:
    assert res.status_code == status, res.text
    error = res.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"] and error["code"] == status
    return error


def message_body(**extra) -> dict:
    return {"messages": [{"role": "user", "content": "q"}], **extra}


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


# --- limits ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [
    b"[" * 20_000 + b"]" * 20_000,  # RecursionError in json before
    json.dumps(message_body(metadata=nested(MAX_DEPTH))).encode(),  # deep inside a field pydantic ignores
    b'{"messages": [{"role": "user", "content": "q"}], "max_tokens": ' + b"9" * 5000 + b"}",  # ValueError in int()
    b'{"messages": [{"role": "user", "content": "q"}], "seed": -' + b"1" * (MAX_INT_DIGITS + 1) + b"}",
    b"\xff\xfe\x00garbage",
    b"",
    b"null",
    b'"a string"',
    b'{"messages": [{"role": "user", "content": "q"}], "temperature": NaN}',
    b'{"messages": [{"role": "user", "content": "q"}], "temperature": 1e999}',
    b'{"messages": [{"role": "user", "content": "q"}], "max_tokens": 1e3}',
    b'{"messages": [{"role": "user", "content": "q"}]} trailing',
])
def test_hostile_bodies_are_400s(frontend, body):
    res = requests.post(frontend.url + CHAT, data=body, headers={"Content-Type": "application/json"})
    assert_openai_error(res, 400)


@pytest.mark.parametrize("route, body, param", [
    (CHAT, message_body() | {"messages": [{"role": "user", "content": "\ud800 lone surrogate"}]}, "messages.0.content"),
    (CHAT, message_body(stream=True) | {"messages": [{"role": "user", "content": "x\udfff"}]}, "messages.0.content"),
    (CHAT, message_body() | {"messages": [{"role": "user", "content": [{"type": "text", "text": "\udc80"}]}]},
     "messages.0.content.0.text"),
    (CHAT, message_body(stop=["ok", "\ud83d"]), "stop.1"),
    ("/v1/completions", {"prompt": "a \ud800 b"}, "prompt"),
])
def test_a_lone_surrogate_is_the_clients_error_not_the_servers(frontend, route, body, param):
    res = requests.post(frontend.url + route, json=body)  # requests escapes it as \ud800: valid JSON, invalid Unicode
    error = assert_openai_error(res, 400)
    assert error["type"] == "invalid_request_error" and error["param"] == param and "surrogate" in error["message"]
    paired = json.dumps(message_body() | {"messages": [{"role": "user", "content": "\U0001f600"}]})
    assert "\\ud83d\\ude00" in paired and requests.post(frontend.url + CHAT, data=paired).status_code == 200


@pytest.mark.parametrize("content", ["nul \x00 byte", "\u202e right-to-left", "x" * 30_000])
def test_odd_but_valid_content_is_never_a_500(frontend, content):
    res = requests.post(frontend.url + CHAT, json=message_body(max_tokens=20) | {
        "messages": [{"role": "user", "content": content}]})
    assert res.status_code < 500, res.text
    assert res.status_code == 200 or assert_openai_error(res, res.status_code)["type"] != "server_error"


def test_nesting_depth_ignores_brackets_in_strings_and_never_recurses():
    assert nesting_depth('{"a": "[[[{{{", "b": ["\\"[", {"c": "]]]"}]}') == 3
    assert nesting_depth("[" * 1_000_000) == 1_000_000
    assert nesting_depth('"' + '\\"' * 100_000) == 0  # quadratic with a backtracking string regex


def test_bodies_over_the_limit_are_413s_with_or_without_content_length(frontend):
    big = json.dumps(message_body(padding="x" * LIMIT)).encode()
    assert_openai_error(requests.post(frontend.url + CHAT, data=big), 413)

    def chunks():  # chunked transfer: no Content-Length, the limit holds while reading
        for i in range(0, len(big), 4096):
            yield big[i:i + 4096]

    assert_openai_error(requests.post(frontend.url + CHAT, data=chunks()), 413)
    assert requests.post(frontend.url + CHAT, json=message_body()).status_code == 200  # and the server is fine


def test_unknown_routes_and_methods_answer_in_openai_shape(frontend):
    assert_openai_error(requests.get(frontend.url + "/v1/nothing"), 404)
    assert_openai_error(requests.get(frontend.url + CHAT), 405)


def test_a_bug_is_a_generic_500_without_its_details(frontend):
    def broken(*args):
        raise RuntimeError("secret detail http://10.0.0.1:30000")

    service_of(frontend).answer = broken
    error = assert_openai_error(requests.post(frontend.url + CHAT, json=message_body()), 500)
    assert error["type"] == "server_error" and "secret" not in error["message"]
    with requests.post(frontend.url + CHAT, json=message_body(stream=True), stream=True, timeout=30) as res:
        lines = [line for line in res.iter_lines(decode_unicode=True) if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    streamed = json.loads(lines[-2][len("data: "):])["error"]
    assert streamed["code"] == 500 and "secret" not in streamed["message"]


# --- clients that leave ----------------------------------------------------------------------------


def leave_early(f: Frontend, body: dict) -> None:
    """Send `body`, then hang up: after the first line of a stream, or after a moment otherwise."""
    payload = json.dumps(body).encode()
    head = f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    with socket.create_connection(("127.0.0.1", f.port), timeout=60) as sock:
        sock.sendall(f"{head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        if body.get("stream"):
            seen = b""
            while b"data: " not in seen:
                seen += sock.recv(4096)
        else:
            time.sleep(0.3)


def settles(count, within_s: float) -> bool:
    """Whether `count()` stops changing (twice the same, 0.5 s apart) within `within_s`."""
    deadline = time.monotonic() + within_s
    last = count()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = count()
        if now == last:
            return True
        last = now
    return False


@pytest.mark.parametrize("stream", [True, False])
def test_clients_that_leave_cancel_their_work(stream):
    sims = make_sims(decode_ms=20.0, steps=30)  # one request: about 20 rounds, several seconds
    for s in sims.values():
        s.__enter__()
    try:
        settings = ServeSettings(max_concurrent=2, queue_timeout_s=30)
        with Frontend(sim_endpoints(sims), settings) as f:
            with ThreadPoolExecutor(10) as pool:
                list(pool.map(lambda _: leave_early(f, message_body(stream=stream)), range(10)))

            def target_requests() -> int:
                return requests.get(sims["target"].url + "/sim/stats").json()["requests"]

            # uncancelled, the 10 runs would go on for about 10 × 20 rounds / 2 slots
            assert settles(target_requests, within_s=4.0), "the work of clients that left goes on"
            stopped = target_requests()
            time.sleep(1.0)
            assert target_requests() == stopped
            assert f.chat().status_code == 200  # both slots came back
    finally:
        for s in sims.values():
            s.__exit__()


def test_a_slot_comes_back_only_when_its_work_has_stopped():
    """AR is one long target request; a server without /abort_request (the simulated ones) cannot stop it
    midway: the next one may start only after it."""
    sims = make_sims(decode_ms=40.0)
    for s in sims.values():
        s.__enter__()
    try:
        with Frontend(sim_endpoints(sims), ServeSettings(max_concurrent=1, queue_timeout_s=30)) as f:
            for _ in range(3):
                leave_early(f, message_body(model="target", stream=True))
            assert f.chat(model="target").status_code == 200
        assert requests.get(sims["target"].url + "/sim/stats").json()["max_batch"] == 1  # never two at once
    finally:
        for s in sims.values():
            s.__exit__()


# --- slots ---------------------------------------------------------------------------------------


def test_queue_timeout_0_takes_a_free_slot_at_once_and_never_waits():
    async def scenario() -> list:
        runner = Runner(slots=1, queue_timeout_s=0, request_timeout_s=10)
        release = asyncio.Event()
        loop = asyncio.get_running_loop()

        def work(is_cancelled, deadline) -> dict:
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result(10)
            return {"ok": True}

        seen = []
        first = await runner.start(work)  # idle: the free slot is taken at once
        started = time.perf_counter()
        try:
            await runner.start(work)
        except APIError as error:  # busy: 429 at once, no wait
            seen.append((error.status, time.perf_counter() - started < 0.5))
        release.set()
        seen.append(await first.future)
        await asyncio.sleep(0.05)  # the slot comes back once the thread has ended
        again = await runner.start(lambda is_cancelled, deadline: {"again": True})
        seen.append(await again.future)
        runner.pool.shutdown()
        return seen

    assert asyncio.run(scenario()) == [(429, True), {"ok": True}, {"again": True}]


def test_serve_with_queue_timeout_0_answers_when_idle(servers):
    with Frontend(sim_endpoints(servers), ServeSettings(queue_timeout_s=0)) as f:
        assert [f.chat().status_code for _ in range(3)] == [200, 200, 200]


class AbortableTarget:
    """A stand-in SGLang server that counts the tokens it decodes and serves /abort_request by `rid`,
    as SGLang does (the simulated servers have no abort)."""

    TOKEN_S = 0.02

    def __init__(self):
        from fastapi import FastAPI, Request
        from fastapi.responses import Response

        from lookahead_reasoning.runtime.servers.processes import UvicornThread

        self.tokens, self.rids, self.aborted, self.finished = 0, [], set(), []
        app = FastAPI()

        @app.get("/model_info")
        async def model_info():
            return {"model_path": "abortable-target", "is_generation": True}

        @app.post("/generate")
        async def generate(request: Request):
            body = await request.json()
            rid, wanted = body.get("rid"), min(int(body["sampling_params"].get("max_new_tokens") or 300), 300)
            self.rids.append(rid)
            for done in range(wanted):
                if rid is not None and rid in self.aborted:
                    self.finished.append(("abort", done))
                    return {"text": "w " * done, "meta_info": {"finish_reason": {"type": "abort", "message": "Abort"},
                                                               "prompt_tokens": 3, "completion_tokens": done}}
                await asyncio.sleep(self.TOKEN_S)
                self.tokens += 1
            self.finished.append(("length", wanted))
            return {"text": "w " * wanted, "meta_info": {"finish_reason": {"type": "length", "length": wanted},
                                                         "prompt_tokens": 3, "completion_tokens": wanted}}

        @app.post("/abort_request")
        async def abort_request(request: Request):
            self.aborted.add((await request.json())["rid"])
            return Response(status_code=200)

        self.server = UvicornThread(app)
        self.url = self.server.url


@pytest.mark.parametrize("stream", [False, True])
def test_ar_requests_whose_clients_left_are_aborted_on_the_target(stream):
    target = AbortableTarget()
    with target.server:
        endpoints = Endpoints(**{r: ServerAddress(url=target.url, chat_template="chatml") for r in ("draft", "target", "judge")})
        config = LookaheadConfig(depth=2, max_tokens=300, request_timeout_s=30, verifier="exact")
        with Frontend(endpoints, ServeSettings(max_concurrent=10), config) as f:
            assert f.chat(model="target", max_tokens=20).status_code == 200  # one that stays: never aborted
            assert target.aborted == set() and target.finished == [("length", 20)]
            with ThreadPoolExecutor(10) as pool:
                list(pool.map(lambda _: leave_early(f, message_body(model="target", stream=stream)), range(10)))
            # run out, the 10 requests would decode 300 tokens each, 6 s
            assert settles(lambda: target.tokens, within_s=4.0), "the AR work of clients that left goes on"
            left = [rid for rid in target.rids[1:]]
            assert len(left) == 10 and all(left) and len(set(left)) == 10  # each has an id of its own
            assert target.aborted == set(left)
            assert sorted(reason for reason, _ in target.finished[1:]) == ["abort"] * 10
            assert target.tokens < 20 + 10 * 100
            assert f.chat(model="target", max_tokens=20).status_code == 200  # and the slots came back


# --- probes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["s3cret", None])
def test_probes_cannot_slow_a_request(servers, key):
    """A stalled judge makes every readiness check wait for its timeout; the requests (exact verifier)
    never ask the judge. Probes hammer /health, /health/live and /metrics meanwhile."""
    config = LookaheadConfig(depth=2, max_tokens=500, request_timeout_s=5, verifier="exact")
    settings = ServeSettings(max_concurrent=2, api_key=key)
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    with Frontend(sim_endpoints(servers), settings, config) as f:
        servers["judge"].engine.state.fault = "stall"

        def timed_request() -> float:
            started = time.perf_counter()
            res = requests.post(f.url + CHAT, json=message_body(), headers=auth, timeout=60)
            assert res.status_code == 200
            return time.perf_counter() - started

        alone = statistics.median(timed_request() for _ in range(5))
        stop, statuses = threading.Event(), set()

        def probe(path: str) -> None:
            while not stop.wait(0.05):  # ~500 probes a second: load, not a race for the CPU of this process
                statuses.add((path, requests.get(f.url + path, timeout=60).status_code))

        with ThreadPoolExecutor(24) as pool:
            for i in range(24):
                pool.submit(probe, ("/health", "/health/live", "/metrics")[i % 3])
            time.sleep(0.5)
            loaded = statistics.median(timed_request() for _ in range(5))
            stop.set()
    # generous: the probes share this process's CPU, and a request can wait long behind them
    assert loaded < 15 * alone, f"a request took {loaded:.2f} s under probes, {alone:.2f} s alone"
    expected = {("/health/live", 200), ("/health", 401 if key else 503), ("/metrics", 401 if key else 200)}
    assert statuses == expected


def test_readiness_needs_the_key_and_shares_one_check(servers):
    with Frontend(sim_endpoints(servers), ServeSettings(api_key="s3cret")) as f:
        auth = {"Authorization": "Bearer s3cret"}
        assert requests.get(f.url + "/health/live").status_code == 200
        assert requests.get(f.url + "/health").status_code == 401
        assert requests.get(f.url + "/metrics").status_code == 401
        assert requests.get(f.url + "/metrics", headers=auth).status_code == 200
        servers["judge"].engine.state.fault = "stall"

        def probe(_=None) -> float:
            started = time.perf_counter()
            res = requests.get(f.url + "/health", headers=auth, timeout=60)
            assert res.status_code == 503 and res.json()["servers"]["judge"] == "unreachable"
            return time.perf_counter() - started

        one = probe()
        time.sleep(CACHE_S + 0.1)
        started = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(probe, range(16)))
        assert time.perf_counter() - started < 3 * one  # one check for all of them, not 16 in a queue


def test_every_route_but_liveness_needs_the_key_in_openai_form(servers, monkeypatch):
    from lookahead_reasoning.runtime.serve import app as app_module

    compared = []
    real_compare = app_module.hmac.compare_digest
    monkeypatch.setattr(app_module.hmac, "compare_digest",
                        lambda a, b: compared.append((len(a), len(b))) or real_compare(a, b))
    with Frontend(sim_endpoints(servers), ServeSettings(api_key="s3cret")) as f:
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert_openai_error(requests.get(f.url + path), 401)
            assert requests.get(f.url + path, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert requests.get(f.url + "/health/live").status_code == 200

        def chat(authorization: str) -> int:
            return requests.post(f.url + CHAT, json=message_body(), headers={"Authorization": authorization}).status_code

        refused = ["s3cret", "Basic s3cret", "Bearer", "Bearer s3cre", "Bearer s3cret-and-more", "Bearers3cret"]
        assert {a: chat(a) for a in refused} == {a: 401 for a in refused}
        assert chat("Bearer s3cret") == 200 and chat("bearer s3cret") == 200
    # constant time: equal-length digests, whatever the length of the key sent
    assert compared and set(compared) == {(32, 32)}


# --- timeouts --------------------------------------------------------------------------------------


def test_role_timeouts_are_shorter_than_the_target_and_split_shared_backends(servers):
    config = LookaheadConfig(request_timeout_s=8)
    assert role_timeouts(config) == {"draft": 2, "target": 8, "judge": 2}
    assert role_timeouts(LookaheadConfig(draft_timeout_s=1, verifier_timeout_s=3))["judge"] == 3
    shared = Endpoints(draft=ServerAddress(url=servers["draft"].url), target=ServerAddress(url=servers["target"].url),
                       judge=ServerAddress(url=servers["target"].url))
    backends = Connection(shared, config).backends
    assert backends["judge"] is not backends["target"] and backends["judge"].timeout_s == 2
    same = Connection(shared, config.model_copy(update={"verifier_timeout_s": 8.0})).backends
    assert same["judge"] is same["target"]


@pytest.mark.parametrize("role, note", [("draft", "draft failed"), ("judge", "verifier failed")])
def test_a_stalled_draft_or_judge_degrades_to_target_steps_within_the_deadline(servers, role, note):
    config = LookaheadConfig(depth=2, max_tokens=500, request_timeout_s=4, draft_timeout_s=0.5, verifier_timeout_s=0.5)
    settings = ServeSettings(request_timeout_s=4)
    with Frontend(sim_endpoints(servers), settings, config) as f:
        servers[role].engine.state.fault = "stall"
        started = time.perf_counter()
        res = f.chat()
        elapsed = time.perf_counter() - started
    assert res.status_code == 200, res.text
    stats = res.json()["lookahead"]
    assert stats["degraded"] and stats["degraded"][0].startswith(note) and "http" not in str(stats["degraded"])
    assert stats["draft_steps_kept"] + stats["target_steps_kept"] == STEPS
    assert elapsed < settings.request_timeout_s


@pytest.mark.parametrize("stream", [False, True])
def test_ar_requests_honour_the_deadline(stream):
    sims = make_sims(decode_ms=40.0)  # AR: about 30 tokens, over a second
    for s in sims.values():
        s.__enter__()
    try:
        with Frontend(sim_endpoints(sims), ServeSettings()) as f:
            started = time.perf_counter()
            assert f.chat(model="target").status_code == 200
            whole = time.perf_counter() - started
        with Frontend(sim_endpoints(sims), ServeSettings(request_timeout_s=0.3)) as f:
            started = time.perf_counter()
            res = requests.post(f.url + CHAT, json=message_body(model="target", stream=stream), stream=stream)
            if stream:
                assert res.status_code == 200
                error = [json.loads(line[6:]) for line in res.iter_lines(decode_unicode=True)
                         if line.startswith("data: {")][-1]["error"]
                assert error["code"] == 504
            else:
                assert assert_openai_error(res, 504)["type"] == "timeout_error"
            assert time.perf_counter() - started < whole
    finally:
        for s in sims.values():
            s.__exit__()


# --- what errors reveal ----------------------------------------------------------------------------


def test_downstream_failures_reveal_no_urls_or_bodies(frontend, servers):
    servers["target"].engine.state.fault = "fail"  # answers 500 {"error": {"message": "simulated failure"}}
    error = assert_openai_error(frontend.chat(), 503)
    assert "http://" not in error["message"] and "simulated" not in error["message"]
    with requests.post(frontend.url + CHAT, json=message_body(stream=True), stream=True, timeout=30) as res:
        text = res.text
    assert '"code": 503' in text and "http://" not in text and "simulated" not in text
    time.sleep(CACHE_S + 0.1)
    assert "http://" not in requests.get(frontend.url + "/health").text


# --- calibration -----------------------------------------------------------------------------------


@pytest.mark.parametrize("content, fragment", [
    ("{not json", "not valid JSON"),
    ('{"llm-judge+numbers@lookahead-sim-judge": {"threshold": 0.5}}', "is not a calibration"),  # the default verifier's
    ('{"llm-judge+numbers@lookahead-sim-judge": 5}', "is not a calibration"),
    ("[1, 2]", "not a JSON object"),
])
def test_a_broken_calibration_file_stops_serve_at_start_up(servers, capsys, tmp_path, monkeypatch,
                                                            content, fragment):
    path = tmp_path / "calibration.json"
    path.write_text(content)
    monkeypatch.setenv("LOOKAHEAD_CALIBRATION", str(path))
    port = free_port()
    outcome = invoke(capsys, "serve", "--draft-url", servers["draft"].url, "--target-url", servers["target"].url,
                     "--judge-url", servers["judge"].url, "--chat-template", "chatml", "--port", str(port))
    one_line_error(outcome, fragment)
    assert not port_in_use(port)
    with pytest.raises(LookaheadError, match="calibration"):  # build_app alone says the same
        config = LookaheadConfig()
        build_app(Connection(sim_endpoints(servers), config.model_copy(update={"verifier": "exact"})), config,
                  ServeSettings())


@pytest.mark.parametrize("later", ["{not json", '{"llm-judge+numbers@lookahead-sim-judge": {"threshold": "high"}}'])
def test_a_calibration_file_that_breaks_while_serving_fails_no_request(servers, tmp_path, monkeypatch, later):
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("LOOKAHEAD_CALIBRATION", str(path))
    with Frontend(sim_endpoints(servers), ServeSettings()) as f:
        path.write_text(later)
        assert f.chat().status_code == 200
