"""Starting the servers of a launch: their commands, ports and processes, until every one answers.

Each server runs in its own process group and is stopped by that group's id, never by name.
Replicas start first; their router (`python -m sglang_router.launch_router --worker-urls ...`,
router.py) starts after they answer, and the endpoints point their roles at the router.

CPU mode (docs/cpu.md) sets SGLANG_USE_CPU_ENGINE=1, --sleep-on-idle (an idle scheduler
otherwise spins a whole core), --disable-overlap-schedule, a bounded KV pool and the dtype the
plan chose, and puts the `common_ops` stand-in on the server's PYTHONPATH (server_models.py). It
also sets OMP_WAIT_POLICY=PASSIVE unless the caller's environment sets it: the draft and target
servers share the host's cores, and OpenMP threads that spin while they wait take those cores
from the other server's threads (a draft request beside a target request then ran 4x slower;
passive threads let both run near their speed alone).

An SGLang server listens only after it has loaded; when another process takes its port by
then, uvicorn logs the error and hangs. A port the group chose is then replaced by another
(up to PORT_TRIES); a port the user named is an error.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lookahead_reasoning.runtime.servers import offline_weights
from lookahead_reasoning.runtime.servers.endpoints import Endpoints, ServerAddress
from lookahead_reasoning.runtime.servers.processes import (
    answers,
    dies_with_parent,
    free_port,
    process_start_time,
    stop_group,
)
from lookahead_reasoning.runtime.servers.router import (
    plain_text,
    reachable,
    router_command,
)
from lookahead_reasoning.runtime.servers.server_models import (
    cpu_stub_dir,
    flag_values,
    gpus_per_server,
    resolve_model,
    resolve_path,
    without_flag,
)
from lookahead_reasoning.runtime.servers.specs import LaunchSpec, ServerSpec, plan

from lookahead_reasoning.errors import LookaheadError

BIND_FAILURE = "error while attempting to bind on address"  # uvicorn's words when its port is taken
PORT_TRIES = 3  # ports tried for a server whose port the group chose, when each was taken before it listened


@dataclass
class ServerProcess:
    """One process of the group: an SGLang server (alone, or one replica behind a router) or a router."""

    spec: ServerSpec
    process: subprocess.Popen
    url: str
    log_path: Path
    command: list[str] = field(default_factory=list)  # what (re)starts it
    env: dict[str, str] | None = None
    kind: str = "server"  # "server", "replica" or "router"
    replica: int = 0  # 1, 2, ... for a replica
    port_given: bool = False  # the user named its port (else the group chose it and may choose another)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def label(self) -> str:
        """How the log names it: "draft server", "target+judge replica 2 of 3", "target+judge router"."""
        if self.kind == "replica":
            return f"{self.name} replica {self.replica} of {self.spec.replicas}"
        return f"{self.name} {self.kind}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float = 20.0) -> None:
        stop_group(self.process, grace_s)

    def exit_reason(self) -> str:
        code = self.process.returncode
        if code is not None and code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit status {code}: {self.last_log_line()}"

    def could_not_listen(self) -> bool:
        """Whether its port was taken before it listened: uvicorn then logs the error and hangs, never exits."""
        try:
            return BIND_FAILURE in self.log_path.read_text(errors="replace")
        except OSError:
            return False

    def last_log_line(self) -> str:
        try:
            lines = [l for l in self.log_path.read_text(errors="replace").splitlines() if l.strip()]
        except OSError:
            return ""
        errors = [l for l in lines if "Error" in l or "error" in l or "ERROR" in l]
        return plain_text((errors or lines or [""])[-1]).strip()[:300]


def spawn(command: list[str], env: dict[str, str] | None, log_path: Path) -> subprocess.Popen:
    """Start `command` in a process group of its own that dies with this process, its output appended to `log_path`."""
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            dies_with_parent(command), env=env, stdout=log_file,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )


class ServerGroup:
    """The servers (and routers) of one launch. Use as a context manager: all stop on exit, also on errors."""

    def __init__(self, launch: LaunchSpec, log_dir: Path | None = None, startup_timeout_s: float = 600.0,
                 log: Callable[[str], None] = print):
        self.plan = plan(launch, log)
        self.startup_timeout_s = startup_timeout_s
        self.log = log
        self.log_dir = log_dir or offline_weights.cache_root().parent / "logs"
        self.starting = False  # True while start() runs: a signal then stops at once
        self.servers: list[ServerProcess] = []  # SGLang servers: alone, or replicas behind a router
        self.routers: list[ServerProcess] = []  # the routers this group started

    def command(self, spec: ServerSpec, port: int, replica: int = 0) -> list[str]:
        """The SGLang server command for `spec` on `port`; `replica` (1, 2, ...) when it is one of several."""
        plan = self.plan
        cmd = [
            sys.executable, "-m", "sglang.launch_server",
            "--model-path", spec.model_path,
            "--host", "127.0.0.1", "--port", str(port),
        ]
        if "judge" in spec.roles and "--grammar-backend" not in spec.extra_args:
            cmd += ["--grammar-backend", plan.grammar_backend]
        if plan.device == "cpu":
            dtype = [] if "--dtype" in flag_values(spec.extra_args) else ["--dtype", plan.dtype_choice(spec).dtype]
            cmd += [
                "--device", "cpu", *dtype,
                "--disable-overlap-schedule", "--sleep-on-idle",
                "--max-total-tokens", str(plan.max_total_tokens),
            ]
        extra = spec.extra_args
        if plan.device == "cuda" and replica and spec.replicas > 1:
            # replicas on one machine take disjoint GPUs: replica i starts at base + (i-1) × (tp × dp × pp)
            base = int(flag_values(extra).get("--base-gpu-id", 0))
            extra = [*without_flag(extra, "--base-gpu-id"),
                     "--base-gpu-id", str(base + (replica - 1) * gpus_per_server(extra))]
        return cmd + extra

    def _router_command(self, spec: ServerSpec, metrics_port: int | None = None) -> list[str]:
        urls = [f"http://127.0.0.1:{port}" for port in spec.worker_ports]
        return router_command(urls, spec.port, self.plan.router_policy, metrics_port, self.plan.router_args)

    def dry_run(self) -> list[str]:
        """The exact commands `start` would run (ports chosen now where none were given), nothing started."""
        lines = []
        env = "".join(f"{name}={shlex.quote(value)} " for name, value in self.cpu_variables().items())
        for spec in self.plan.specs:
            if spec.router_url is not None:
                lines.append(f"# {spec.name}: the router at {spec.router_url} (started elsewhere; nothing to start)")
                continue
            model_path = (str(offline_weights.folder_of(spec.model)) if spec.model in offline_weights.MODEL_NAMES
                          else resolve_path(spec.model))
            planned = ServerSpec(spec.model, spec.roles, spec.extra_args, spec.port or free_port(), model_path,
                                 replicas=spec.replicas, worker_ports=[p or free_port() for p in spec.worker_ports])
            choice = self.plan.dtype_choice(spec)
            why = f"\n# dtype: {choice}" if choice else ""
            if spec.replicas == 1:
                command = self.command(planned, planned.port)
                lines.append(f"# {spec.name} server ({spec.model}){why}\n{env}{shlex.join(command)}")
                continue
            for i, port in enumerate(planned.worker_ports, start=1):
                command = self.command(planned, port, replica=i)
                lines.append(f"# {spec.name} replica {i} of {spec.replicas} ({spec.model}){why}\n{env}{shlex.join(command)}")
            lines.append(f"# {spec.name} router ({self.plan.router_policy} over {spec.replicas} replicas)\n"
                         f"{shlex.join(self._router_command(planned))}")
        return lines

    def cpu_variables(self) -> dict[str, str]:
        """What CPU servers get on top of the caller's environment (nothing on a GPU)."""
        if self.plan.device != "cpu":
            return {}
        variables = {"SGLANG_USE_CPU_ENGINE": "1"}
        if "OMP_WAIT_POLICY" not in os.environ:
            variables["OMP_WAIT_POLICY"] = "PASSIVE"
        variables["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(cpu_stub_dir()), os.environ.get("PYTHONPATH")) if p)
        return variables

    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.cpu_variables()}

    def _launch(self, spec: ServerSpec, kind: str, port: int, command: list[str], env: dict[str, str] | None,
                replica: int = 0, port_given: bool = False) -> ServerProcess:
        stem = spec.name + (f"-replica{replica}" if kind == "replica" else "-router" if kind == "router" else "")
        log_path = self.log_dir / f"{stem}-{port}.log"
        log_path.unlink(missing_ok=True)
        process = ServerProcess(spec, None, f"http://127.0.0.1:{port}", log_path, command, env, kind, replica,  # type: ignore[arg-type]
                                port_given=port_given)
        what = f"{spec.model}" if kind != "router" else f"{self.plan.router_policy} over {spec.replicas} replicas"
        self.log(f"starting {process.label} ({what}) on 127.0.0.1:{port}, log {log_path}")
        choice = self.plan.dtype_choice(spec) if kind != "router" else None
        if choice:
            self.log(f"{process.label} dtype: {choice}")
        process.process = spawn(command, env, log_path)
        return process

    def check_routers(self) -> None:
        """Fail at once, before anything starts, when a router given by URL does not answer at all."""
        for spec in self.plan.specs:
            if spec.router_url is not None:
                if not reachable(spec.router_url):
                    raise LookaheadError(f"cannot reach the {spec.name} router at {spec.router_url}")
                if spec.model in offline_weights.MODEL_NAMES:
                    spec.chat_template = offline_weights.chat_template_for(spec.model)

    def start(self) -> Endpoints:
        """Check given routers, prepare offline models, start every server, then the routers; wait until all answer."""
        self.starting = True
        try:
            self.check_routers()
            started = self.plan.started_specs
            for spec in started:
                spec.model_path, spec.chat_template = resolve_model(spec.model, self.log)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            env = self.environment()
            for spec in started:
                if spec.replicas == 1:
                    given = spec.port is not None
                    port = spec.port = spec.port or free_port()
                    self.servers.append(self._launch(spec, "server", port, self.command(spec, port), env,
                                                     port_given=given))
                    continue
                given_ports = [p is not None for p in spec.worker_ports]
                spec.worker_ports = [p or free_port() for p in spec.worker_ports]
                for i, port in enumerate(spec.worker_ports, start=1):
                    self.servers.append(self._launch(spec, "replica", port, self.command(spec, port, i), env, i,
                                                     port_given=given_ports[i - 1]))
            self._wait_ready(self.servers)
            for spec in started:
                if spec.replicas > 1:
                    spec.port = spec.port or free_port()
                    self.routers.append(self._launch(spec, "router", spec.port, self._router_command(spec), None))
            self._wait_ready(self.routers, [s for s in self.plan.specs if s.router_url is not None])
        finally:
            self.starting = False
        return self.endpoints()

    def _wait_ready(self, processes: list[ServerProcess], given: Iterable[ServerSpec] = ()) -> None:
        """Until every process (and every router given by URL) answers its model-info route."""
        deadline = time.monotonic() + self.startup_timeout_s
        pending: list = [*processes, *given]
        tries: dict[str, int] = {}  # ports tried so far, by server label
        while pending:
            for item in list(pending):
                if isinstance(item, ServerProcess):
                    if not item.alive():
                        raise LookaheadError(f"the {item.label} exited during start-up: {item.last_log_line()}")
                    if item.kind != "router" and item.could_not_listen():
                        tries[item.label] = tries.get(item.label, 1) + 1
                        moved = self._move(item, tries[item.label])
                        pending = [moved if p is item else p for p in pending]
                        continue
                    url, label = item.url, item.label
                else:
                    url, label = item.router_url, f"{item.name} router"
                if answers(url, timeout_s=5):
                    self.log(f"{label} ready at {url}")
                    pending.remove(item)
            if pending and time.monotonic() > deadline:
                names = "; ".join(f"{i.label} (its log ends: {i.last_log_line()})" if isinstance(i, ServerProcess)
                                  else f"{i.name} router at {i.router_url}" for i in pending)
                raise LookaheadError(f"not ready within {self.startup_timeout_s:g} s: {names}")
            if pending:
                time.sleep(1.0)

    def _move(self, server: ServerProcess, tries: int) -> ServerProcess:
        """Stop a server whose port was taken before it listened; start it again on a new port, in its place
        among the servers. A port the user named, or the last of PORT_TRIES, is an error instead."""
        server.stop()
        if server.port_given or tries > PORT_TRIES:
            raise LookaheadError(f"the {server.label} could not listen on {server.url}: "
                                 f"another process took the port while it started")
        spec, port = server.spec, free_port()
        self.log(f"the {server.label} could not listen on {server.url}: the port was taken while it started; "
                 f"trying port {port}")
        if server.kind == "replica":
            spec.worker_ports[server.replica - 1] = port
        else:
            spec.port = port
        moved = self._launch(spec, server.kind, port, self.command(spec, port, server.replica), server.env,
                             server.replica)
        self.servers = [moved if s is server else s for s in self.servers]
        return moved

    def replicas_of(self, spec: ServerSpec) -> list[ServerProcess]:
        """The SGLang servers of `spec`: its one server, or its replicas."""
        return [s for s in self.servers if s.spec is spec]

    def endpoints(self, restarting: Iterable[str] = ()) -> Endpoints:
        """Where each role is served; `restarting`: the roles the supervisor has down now."""
        by_role = {role: spec for spec in self.plan.specs for role in spec.roles}
        return Endpoints(
            **{
                role: ServerAddress(
                    url=spec.router_url if spec.router_url is not None else f"http://127.0.0.1:{spec.port}",
                    chat_template=spec.chat_template,
                    model=spec.model,
                    workers=[s.url for s in self.replicas_of(spec)] if spec.replicas > 1 else [],
                    dtype=self._served_dtype(spec),
                )
                for role, spec in by_role.items()
            },
            launcher_pid=os.getpid(),
            launcher_started=process_start_time(os.getpid()),
            restarting=list(restarting),
        )

    def _served_dtype(self, spec: ServerSpec) -> str | None:
        """The dtype of the CPU servers this group started for `spec`; None for a router given by URL or a GPU."""
        choice = self.plan.dtype_choice(spec) if spec.router_url is None else None
        return choice.dtype if choice else None

    def stop(self) -> None:
        for process in [*self.routers, *self.servers]:  # routers first: nothing is sent to a stopping server
            process.stop()

    def __enter__(self) -> ServerGroup:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
