"""The launcher with real SGLang CPU servers whose port another process takes while they start.

An SGLang server listens on its port only after it has loaded (tens of seconds); when the port is
taken by then, uvicorn logs the error and the server hangs instead of exiting. The launcher must
notice: a port it chose is replaced by another, a port the user named is a clear error.
"""

import socket

import pytest

from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.runtime.servers import processes, starting
from lookahead_reasoning.runtime.servers.specs import LaunchSpec
from lookahead_reasoning.runtime.servers.starting import ServerGroup
from lookahead_reasoning.runtime.servers.processes import answers

pytestmark = [pytest.mark.server, pytest.mark.slow]  # a minute each: a real server started per test


def _listening(port: int = 0) -> socket.socket:
    """A socket that holds `port` (0: any), as another program's server would."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen(8)
    return holder


def _group(tmp_path, messages: list[str], **kwargs) -> ServerGroup:
    # one server: the tiny model serves all three roles
    return ServerGroup(LaunchSpec("tiny", "tiny", device="cpu", max_total_tokens=8192, **kwargs), log_dir=tmp_path,
                       startup_timeout_s=300, log=messages.append)


def test_a_chosen_port_taken_while_the_server_starts_is_replaced(tmp_path, monkeypatch):
    messages: list[str] = []
    with _listening() as holder:
        taken = holder.getsockname()[1]
        chosen = iter([taken])
        monkeypatch.setattr(starting, "free_port", lambda: next(chosen, None) or processes.free_port())
        with _group(tmp_path, messages) as group:
            url = group.endpoints().target.url
            assert url != f"http://127.0.0.1:{taken}"
            assert answers(url)
    assert any(f"could not listen on http://127.0.0.1:{taken}" in m for m in messages), messages


def test_a_named_port_taken_while_the_server_starts_is_a_clear_error(tmp_path):
    messages: list[str] = []
    port = processes.free_port()
    group = _group(tmp_path, messages, ports=[port])  # the port is free when the launch is checked...
    with _listening(port):  # ...and taken before the server listens
        with pytest.raises(LookaheadError, match=f"could not listen on http://127.0.0.1:{port}: another process"):
            with group:
                pass
    assert not group.servers[0].alive()
