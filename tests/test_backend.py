"""The programs' backend finds a server's model by its current route or the older one."""

import pytest
from fastapi import FastAPI

from lookahead_reasoning.runtime.processes import UvicornThread


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
