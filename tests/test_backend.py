"""The programs' backend: a server's model by its current route or the older one, a dropped connection tried once
more, a server that never answers as one timeout, the proxy the environment names, and typed gens as regexes."""

import json
import socket
import threading

import pytest
from fastapi import FastAPI
from sglang.lang.ir import REGEX_BOOL, REGEX_FLOAT, REGEX_INT, REGEX_STR, SglSamplingParams

from lookahead_reasoning.programs.backend import dtype_as_regex
from lookahead_reasoning.runtime.servers.processes import UvicornThread


def _raw_server(answer):
    """An HTTP server on a bare socket, one connection at a time: `answer(request bytes)` gives the bytes to
    send back, or None to close the connection without a word. Returns the listening socket (closing it
    stops the server) and its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                reply = answer(conn.recv(65536))
                if reply is not None:
                    conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    return listener, "http://127.0.0.1:%d" % listener.getsockname()[1]


MODEL_INFO = json.dumps({"model_path": "m"}).encode()
MODEL_INFO_REPLY = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(MODEL_INFO), MODEL_INFO))


def _server(route: str) -> FastAPI:
    app = FastAPI()

    @app.get(route)
    def info():
        return {"model_path": "Qwen/Qwen2.5-1.5B-Instruct"}

    return app


@pytest.mark.parametrize("route", ["/model_info", "/get_model_info"])
def test_model_info_on_current_and_older_servers(route):
    from lookahead_reasoning.programs.backend import LookaheadEndpoint

    with UvicornThread(_server(route)) as server:
        backend = LookaheadEndpoint(server.url, chat_template="chatml", timeout_s=5)
    assert backend.model_info["model_path"] == "Qwen/Qwen2.5-1.5B-Instruct"


def test_a_server_without_model_info_is_a_clear_error():
    from lookahead_reasoning.programs.backend import BackendError, LookaheadEndpoint

    with UvicornThread(_server("/other")) as server:
        with pytest.raises(BackendError, match="HTTP 404"):
            LookaheadEndpoint(server.url, chat_template="chatml", timeout_s=5)


def test_a_connection_dropped_by_the_server_is_tried_once_more():
    """The first connection is closed without an answer (a kept-alive connection the server dropped);
    the request goes through on a fresh one, and a server that drops every connection is unreachable."""
    from lookahead_reasoning.programs.backend import BackendError, LookaheadEndpoint

    drops = {"left": 1}

    def answer(request):
        if drops["left"] > 0:
            drops["left"] -= 1
            return None
        return MODEL_INFO_REPLY

    listener, url = _raw_server(answer)
    try:
        assert LookaheadEndpoint(url, chat_template="chatml", timeout_s=5).model_info == {"model_path": "m"}
        drops["left"] = 10**9
        with pytest.raises(BackendError, match="cannot reach"):
            LookaheadEndpoint(url, chat_template="chatml", timeout_s=5)
    finally:
        listener.close()


def test_a_server_that_never_answers_is_a_timeout_not_a_hang():
    import time

    from lookahead_reasoning.programs.backend import BackendError, LookaheadEndpoint

    with socket.socket() as listener:  # accepts connections (the kernel's backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = "http://127.0.0.1:%d" % listener.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(BackendError, match=r"/model_info did not answer within 0.5 s"):
            LookaheadEndpoint(url, chat_template="chatml", timeout_s=0.5)
        assert time.monotonic() - started < 5


def test_a_timeout_is_not_tried_again():
    """A server that hangs costs one timeout: the request is not sent a second time."""
    from lookahead_reasoning.programs.backend import BackendError, LookaheadEndpoint

    accepted: list[socket.socket] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def accept():  # every connection, each held open without an answer
            while True:
                try:
                    accepted.append(listener.accept()[0])
                except OSError:
                    return

        threading.Thread(target=accept, daemon=True).start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        try:
            with pytest.raises(BackendError, match=r"did not answer within 0.3 s"):
                LookaheadEndpoint(url, chat_template="chatml", timeout_s=0.3)
            assert len(accepted) == 1
        finally:
            for conn in accepted:
                conn.close()


def test_requests_go_through_the_proxy_the_environment_names(monkeypatch):
    from lookahead_reasoning.programs.backend import BackendError, LookaheadEndpoint

    seen: list[bytes] = []

    def answer(request):
        seen.append(request.split(b"\r\n")[0])
        return MODEL_INFO_REPLY

    listener, proxy_url = _raw_server(answer)
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", proxy_url)
    try:
        assert LookaheadEndpoint("http://sglang.invalid:30000", chat_template="chatml", timeout_s=5).model_info == {
            "model_path": "m"}
        assert seen == [b"GET http://sglang.invalid:30000/model_info HTTP/1.1"]
        monkeypatch.setenv("no_proxy", "sglang.invalid")  # bypassed: straight to a host that does not exist
        with pytest.raises(BackendError, match="cannot reach"):
            LookaheadEndpoint("http://sglang.invalid:30000", chat_template="chatml", timeout_s=5)
        assert len(seen) == 1
    finally:
        listener.close()


def _one_text_server(texts: list) -> FastAPI:
    """A server that, like SGLang's router, takes one text per `/generate` (HTTP 422 for a list); it writes
    the prompt's last character `max_new_tokens` times."""
    from fastapi import Request
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.get("/model_info")
    def info():
        return {"model_path": "m"}

    @app.post("/generate")
    async def generate(request: Request):
        body = await request.json()
        texts.append(body["text"])
        if not isinstance(body["text"], str):
            return JSONResponse({"detail": "text: expected a string"}, status_code=422)
        tokens = body["sampling_params"]["max_new_tokens"]
        return {"text": body["text"][-1] * tokens,
                "meta_info": {"finish_reason": {"type": "length", "length": tokens}, "completion_tokens": tokens}}

    return app


def _requests(backend, caps=(1, 2, 3)):
    from sglang.lang.ir import SglSamplingParams

    return [backend.generation_request(text, SglSamplingParams(max_new_tokens=cap, temperature=0.0))
            for text, cap in zip(["ab", "cd", "ef"], caps)]


def test_a_batch_is_one_request_with_a_sampling_params_each():
    from lookahead_reasoning.eval.simserver import SimConfig, SimServerThread
    from lookahead_reasoning.programs.backend import LookaheadEndpoint

    with SimServerThread(SimConfig(role="target", decode_ms=0.1)) as server:
        backend = LookaheadEndpoint(server.url, chat_template="chatml", timeout_s=30)
        backend.request_log = []
        answers = backend.generate_batch(_requests(backend, caps=(1, 2, 3)))
    assert len(backend.request_log) == 1
    assert [answer["meta_info"]["completion_tokens"] for answer in answers] == [1, 2, 3]  # each its own cap


def test_an_endpoint_that_refuses_batches_gets_single_requests_from_then_on():
    from lookahead_reasoning.programs.backend import LookaheadEndpoint

    texts: list = []
    with UvicornThread(_one_text_server(texts)) as server:
        backend = LookaheadEndpoint(server.url, chat_template="chatml", timeout_s=5)
        first = backend.generate_batch(_requests(backend))
        asked_first, texts[:] = list(texts), []
        again = backend.with_seed(7).generate_batch(_requests(backend))  # a view of the same server knows too
    assert [answer["text"] for answer in first] == [answer["text"] for answer in again] == ["b", "dd", "fff"]
    assert asked_first[0] == ["ab", "cd", "ef"] and sorted(asked_first[1:]) == ["ab", "cd", "ef"]
    assert sorted(texts) == ["ab", "cd", "ef"]  # no list asked again


@pytest.mark.parametrize("dtype, regex", [(int, REGEX_INT), ("float", REGEX_FLOAT), (str, REGEX_STR), ("bool", REGEX_BOOL)])
def test_a_gen_dtype_becomes_sglangs_regex_without_touching_the_callers_parameters(dtype, regex):
    params = SglSamplingParams(dtype=dtype, stop="END")
    constrained = dtype_as_regex(params)
    assert constrained.regex == regex and constrained.dtype is None
    assert constrained.stop == (["END", " ", "\n"] if regex in (REGEX_INT, REGEX_FLOAT) else ["END"])
    assert params.dtype == dtype and params.regex is None and params.stop == "END"
    assert dtype_as_regex(SglSamplingParams()) == SglSamplingParams()
    with pytest.raises(ValueError, match="dtype must be int, float, str or bool"):
        dtype_as_regex(SglSamplingParams(dtype=list))
