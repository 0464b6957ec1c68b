"""Process and port helpers the launcher, `serve` and the simulated servers share (runtime/servers/processes.py),
and `lookahead stop`'s refusal to signal a process it cannot identify."""

import json
import socket
import subprocess
import time

import pytest
from cli_invoke import invoke, one_line_error

from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.runtime.servers.endpoints import ServerAddress, Endpoints
from lookahead_reasoning.runtime.servers.supervision import stop_launcher
from lookahead_reasoning.runtime.servers.processes import UvicornThread, free_port, port_in_use, process_start_time


def _time_wait_on(port: int) -> None:
    """Leave a TIME_WAIT connection on `port`, as a server that is killed with clients connected does,
    and nothing listening there."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(1)
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
    time.sleep(0.05)
    client.close()
    listener.close()


def _time_wait_ports() -> set[int]:
    """Local ports of TIME_WAIT sockets (state 06 in /proc/net/tcp)."""
    ports = set()
    with open("/proc/net/tcp") as table:
        for line in list(table)[1:]:
            fields = line.split()
            if fields[3] == "06":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_a_port_left_in_time_wait_is_free_for_a_restart():
    port = free_port()
    _time_wait_on(port)
    assert port in _time_wait_ports()
    assert not port_in_use(port)  # a restarted server binds it, as below: the check must agree
    with UvicornThread(lambda scope, receive, send: None, port=port) as server:
        assert server.port == port
        assert port_in_use(port)  # a listening socket still counts


def test_a_listening_port_is_in_use_on_every_address_family():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        assert port_in_use(listener.getsockname()[1])
    with socket.socket(socket.AF_INET6) as listener:
        try:
            listener.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
        listener.listen(1)
        port = listener.getsockname()[1]
        assert port_in_use(port, "::1")
    assert not port_in_use(free_port(), "::1")


@pytest.fixture
def bystander():
    """An unrelated process whose PID an old endpoints file might name."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def _endpoints(**launcher) -> Endpoints:
    url = ServerAddress(url="http://127.0.0.1:9")
    return Endpoints(draft=url, target=url, judge=url, **launcher)


def test_stop_signals_no_process_whose_start_time_the_file_does_not_record(bystander, capsys, tmp_path):
    with pytest.raises(LookaheadError, match="does not record when"):
        stop_launcher(_endpoints(launcher_pid=bystander.pid))
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps({**json.loads(_endpoints().model_dump_json()), "launcher_pid": bystander.pid}))
    outcome = invoke(capsys, "stop", "--endpoints", str(path))
    one_line_error(outcome, "nothing was signalled")
    assert "servers stopped" not in outcome.stderr
    time.sleep(0.1)
    assert bystander.poll() is None  # still alive


def test_stop_signals_no_process_that_started_at_another_time(bystander):
    started = process_start_time(bystander.pid)
    with pytest.raises(LookaheadError, match="not the launcher"):
        stop_launcher(_endpoints(launcher_pid=bystander.pid, launcher_started=started + 1))
    assert bystander.poll() is None
    stop_launcher(_endpoints(launcher_pid=bystander.pid, launcher_started=started), timeout_s=10)  # proven: signalled
    assert bystander.wait(10) != 0


def test_free_ports_lie_below_the_ephemeral_range_and_are_never_handed_out_twice():
    # connect() takes its local ports from the ephemeral range: a port chosen there can be gone by
    # the time a slow-starting server listens on it
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
        ephemeral_low = int(ports.read().split()[0])
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert max(ports) < ephemeral_low
    assert not any(port_in_use(port) for port in ports)
