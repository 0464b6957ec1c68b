"""Ports, child processes and in-thread HTTP servers: the helpers every launcher shares.

Children run in their own process group and are stopped by that group's id, never by name.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable

import requests

# A child that must not outlive the process that started it: the kernel sends it SIGKILL
# when that process dies (prctl PR_SET_PDEATHSIG survives exec), and it exits at once
# if its parent is already gone. preexec_fn is not safe in a threaded process, so a
# one-line Python prelude sets it and then execs the real command.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL)); "
    "os.getppid() == int(sys.argv[1]) or os._exit(1); "
    "os.execvp(sys.argv[2], sys.argv[2:])"
)


def dies_with_parent(command: list[str]) -> list[str]:
    """`command` wrapped so that the kernel kills it when this process dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return command
    return [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *command]


# Where free_port looks: under the kernel's ephemeral range (32768 and up by default), from which
# every outgoing connection takes its local port, and under SGLang's own 22000-29999 (where a
# server picks the port its scheduler binds later).
PORT_RANGE = (10000, 21999)
_handed_out: set[int] = set()
_port_draws = random.SystemRandom()  # not the global RNG: processes that seed it alike would pick alike


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port free now that no outgoing connection takes before its server listens on it.

    An SGLang server binds its port about a minute after it starts. A port from bind(0) lies in
    the ephemeral range, where any connection made meanwhile (health checks, the other servers'
    start-up) may take it, and the server then cannot listen. So the port comes from PORT_RANGE,
    and one process never hands out the same port twice.
    """
    low, high = PORT_RANGE[0], min(PORT_RANGE[1], _ephemeral_low() - 1)
    candidates = range(low, high + 1)
    for port in _port_draws.sample(candidates, min(64, len(candidates))):
        if port not in _handed_out and not port_in_use(port):
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could not listen on `port` now.

    The probe binds with SO_REUSEADDR, as uvicorn and SGLang's servers do: the TIME_WAIT
    connections a killed server leaves behind for about a minute do not block them, so they
    must not block a restart either. A socket that listens there still does.
    """
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (field 3 onwards), or None."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def running(pid: int) -> bool:
    """Whether `pid` is a live process (an exited child that is not yet reaped does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat_fields(pid)
    return fields is None or fields[0] != "Z"


def process_start_time(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (with the PID, it names one process); None if gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def stop_group(process: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM to the child's process group, SIGKILL after `grace_s`; waits for the child."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(10)


def answers(url: str, timeout_s: float = 2.0) -> bool:
    """Whether an SGLang (or simulated) server at `url` answers its model-info route."""
    for route in ("/model_info", "/get_model_info"):
        try:
            if requests.get(url + route, timeout=timeout_s).status_code == 200:
                return True
        except requests.RequestException:
            return False
    return False


def wait_until(ready: Callable[[], bool], alive: Callable[[], bool], timeout_s: float, what: str,
               poll_s: float = 0.2) -> None:
    """Poll `ready` until it holds; RuntimeError when `alive` fails first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if not alive():
            raise RuntimeError(f"{what} exited during start-up")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start within {timeout_s:g} s")
        time.sleep(poll_s)


class UvicornThread:
    """An ASGI app served by uvicorn on 127.0.0.1 in a daemon thread; a context manager."""

    def __init__(self, app, port: int = 0, on_exit: Callable[[], None] | None = None):
        import uvicorn

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.on_exit = on_exit
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> UvicornThread:
        self.thread.start()
        wait_until(lambda: self.server.started, self.thread.is_alive, 30, f"HTTP server on {self.url}", 0.02)
        return self

    def __exit__(self, *exc) -> None:
        if self.on_exit:
            self.on_exit()
        self.server.should_exit = True
        self.thread.join(10)
