"""Process and port helpers the launcher, `serve` and the simulated servers share (runtime/processes.py)."""

import socket
import time

import pytest

from lookahead_reasoning.runtime.processes import UvicornThread, free_port, port_in_use


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
