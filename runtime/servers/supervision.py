"""Supervising a started launch: restarts with backoff, the loop that `lookahead launch` runs, and stopping.

A process gets `max_restarts` restarts, the first after `restart_backoff_s`, each next one after
twice as long. A replica whose restarts are spent stays down while another replica of its model
answers (the router sends requests to those). A draft or judge server (or router) whose restarts
are spent stays down (runs degrade to target steps); a target server or router whose restarts
are spent is an error, and so are target replicas that are all given up.

The launch loop writes the endpoints file, rewrites it when the roles that are down change, and
stops on SIGINT or SIGTERM (at once during start-up), removing the file it wrote.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lookahead_reasoning.runtime.servers.endpoints import (
    ROLES,
    Endpoints,
    load_endpoints,
    save_endpoints,
)
from lookahead_reasoning.runtime.servers.processes import (
    answers,
    process_start_time,
    running,
)
from lookahead_reasoning.runtime.servers.specs import ServerSpec
from lookahead_reasoning.runtime.servers.starting import (
    ServerGroup,
    ServerProcess,
    spawn,
)

from lookahead_reasoning.errors import LookaheadError

LOOK_EVERY_S = 0.5  # how often the launch loop looks at its servers


@dataclass
class Watch:
    """What the supervisor knows of one process."""

    server: ServerProcess
    restarts: int = 0  # restarts so far
    restart_at: float | None = None  # when the next restart is due (the process is down)
    warming: bool = False  # restarted, not yet answering
    given_up: bool = False  # down for good: its restarts are spent

    @property
    def down(self) -> bool:
        """Dead, waiting for a restart, warming up after one, or given up."""
        return self.given_up or self.restart_at is not None or self.warming or not self.server.alive()


class Supervisor:
    """Restarts the dead processes of a started group; says which roles are down meanwhile."""

    def __init__(self, group: ServerGroup, max_restarts: int = 3, restart_backoff_s: float = 2.0):
        self.group = group
        self.max_restarts = max_restarts
        self.restart_backoff_s = restart_backoff_s
        self.watches = [Watch(process) for process in [*group.servers, *group.routers]]

    def supervise(self) -> None:
        """One look at every server and router: schedule, start and check restarts of the dead ones."""
        now, log = time.monotonic(), self.group.log
        for watch in self.watches:
            server = watch.server
            if watch.given_up:
                continue
            if watch.restart_at is None and not server.alive():
                reason = server.exit_reason()
                if watch.restarts >= self.max_restarts:
                    watch.given_up = True
                    self._give_up(watch, reason)
                    continue
                delay = self.restart_backoff_s * 2 ** watch.restarts
                watch.restart_at, watch.warming = now + delay, False
                log(f"the {server.label} died ({reason}); restarting in {delay:g} s "
                    f"(try {watch.restarts + 1} of {self.max_restarts})")
            elif watch.restart_at is not None and now >= watch.restart_at:
                watch.restarts += 1
                watch.restart_at, watch.warming = None, True
                server.process = spawn(server.command, server.env, server.log_path)
                log(f"restarting the {server.label} on {server.url}")
            elif watch.warming and answers(server.url, timeout_s=1):
                watch.warming = False
                log(f"the {server.label} is ready again at {server.url}")

    def _give_up(self, watch: Watch, reason: str) -> None:
        server = watch.server
        spent = f"the {server.label} died and {watch.restarts} restarts failed"
        if server.kind == "replica":
            others = [w for w in self._servers_of(server.spec) if not w.given_up]
            if others:
                self.group.log(f"{spent}; its router sends requests to the other {len(others)} ({reason})")
                return
        if "target" in server.spec.roles:
            raise LookaheadError(f"{spent}: {reason}")
        self.group.log(f"{spent}; runs go on with target steps only ({reason})")

    def _servers_of(self, spec: ServerSpec) -> list[Watch]:
        return [w for w in self.watches if w.server.kind != "router" and w.server.spec is spec]

    def restarting(self) -> list[str]:
        """Roles that cannot be served now: their server or router is down or warming up after a
        restart, or all their replicas are (one replica down behind a router is not a role down)."""
        roles = []
        for spec in self.group.plan.started_specs:
            servers = self._servers_of(spec)
            if spec.replicas == 1:
                down = any(w.down for w in servers)
            else:
                down = any(w.down for w in self.watches if w.server.kind == "router" and w.server.spec is spec) \
                    or all(w.down for w in servers)
            if down:
                roles += spec.roles
        return [role for role in ROLES if role in roles]

    def endpoints(self) -> Endpoints:
        return self.group.endpoints(self.restarting())


def run_launch(group: ServerGroup, path: Path, max_restarts: int = 3, restart_backoff_s: float = 2.0,
               on_ready: Callable[[Path], None] = lambda path: None,
               on_stopping: Callable[[], None] = lambda: None) -> None:
    """Start the group, write the endpoints file at `path` and supervise until SIGINT or SIGTERM; then stop all.

    A signal during start-up stops at once (as KeyboardInterrupt). The endpoints file is
    rewritten when the roles that are down change (`serve`'s /health reads them), and removed at
    the end if this process wrote it.
    """
    group.check_routers()  # a router given by URL that is down: one line, before anything starts
    stopping = False

    def on_signal(signum, frame):
        nonlocal stopping
        if group.starting:
            raise KeyboardInterrupt
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        written = group.start()
        save_endpoints(written, path)
        on_ready(path)
        supervisor = Supervisor(group, max_restarts, restart_backoff_s)
        while not stopping:
            supervisor.supervise()
            current = supervisor.endpoints()
            if current.restarting != written.restarting:
                save_endpoints(current, path)
                written = current
            time.sleep(LOOK_EVERY_S)
        on_stopping()
    finally:
        group.stop()
        if path.exists() and load_endpoints(path).launcher_pid == os.getpid():
            path.unlink()


def stop_launcher(endpoints: Endpoints, timeout_s: float = 60.0) -> None:
    """Ask the launcher that wrote `endpoints` to stop its servers, and wait for it.

    The file names the launcher's PID and start time; a PID that now belongs to another
    process (the launcher died and the PID was reused) is not signalled. A file without the
    start time cannot prove which process its PID names: nothing is signalled then either.
    """
    pid = endpoints.launcher_pid
    if pid is None:
        raise LookaheadError("the endpoints file names no launcher process")
    started = process_start_time(pid)
    if started is None or not running(pid):
        raise LookaheadError(f"launcher process {pid} is not running")
    if endpoints.launcher_started is None:
        raise LookaheadError(f"the endpoints file does not record when launcher process {pid} started, so "
                             f"process {pid} may be another program now; nothing was signalled (stop the "
                             "launcher yourself if it is one)")
    if started != endpoints.launcher_started:
        raise LookaheadError(f"process {pid} is not the launcher that wrote the endpoints file (it started at another time)")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        raise LookaheadError(f"launcher process {pid} is not running") from None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not running(pid):
            return
        time.sleep(0.5)
    raise LookaheadError(f"launcher process {pid} did not stop within {timeout_s:g} s")
