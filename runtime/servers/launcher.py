"""Start, health-check and stop the SGLang servers for the three roles.

One server per distinct model; a role whose model is already served shares that
server (on a small machine the target doubles as judge). Each server runs in its own
process group and is stopped by that group's id, never by name.

Replicas: a model given `replicas` > 1 gets that many servers and one SGLang router
(`sglang-router`, `python -m sglang_router.launch_router --worker-urls ...`) in front of
them, started after the servers answer; the endpoints point its roles at the router.
Routers are health-checked, supervised and stopped like the servers, and die with the
launcher. A role given a router URL uses that router, and nothing is started for it.

CPU mode (docs/cpu.md) sets SGLANG_USE_CPU_ENGINE=1, --sleep-on-idle (an idle scheduler
otherwise spins a whole core), --disable-overlap-schedule and a bounded KV pool, and puts
the `common_ops` stand-in on the server's PYTHONPATH (server_models.py). It also sets
OMP_WAIT_POLICY=PASSIVE unless the caller's environment sets it: the draft and target
servers share the host's cores, and OpenMP threads that spin while they wait take those
cores from the other server's threads (a draft request beside a target request then ran
4x slower; passive threads let both run near their speed alone). Its dtype is
bfloat16 where the CPU has AMX-BF16 or AVX-512-BF16 and float32 elsewhere (cpu_dtype.py);
`dtype` or a --dtype in a server's args overrides that. GPU servers get SGLang's own dtype.
Router commands are in router.py.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lookahead_reasoning.runtime.servers import offline_weights
from lookahead_reasoning.runtime.servers.cpu_dtype import DtypeChoice, check_dtype, choose_cpu_dtype, cpu_flags
from lookahead_reasoning.runtime.servers.endpoints import ROLES, ServerAddress, Endpoints
from lookahead_reasoning.runtime.servers.processes import (
    answers,
    dies_with_parent,
    free_port,
    port_in_use,
    process_start_time,
    running,
    stop_group,
)
from lookahead_reasoning.runtime.servers.router import (
    ROUTER_POLICIES,
    check_router_installed,
    plain_text,
    reachable,
    router_command,
)
from lookahead_reasoning.runtime.servers.server_models import (
    check_model,
    cpu_stub_dir,
    detect_device,
    flag_values,
    gpus_per_server,
    resolve_model,
    resolve_path,
    without_flag,
)

from lookahead_reasoning.errors import LookaheadError


BIND_FAILURE = "error while attempting to bind on address"  # uvicorn's words when its port is taken
PORT_TRIES = 3  # ports tried for a server whose port the group chose, when each was taken before it listened


@dataclass
class ServerSpec:
    model: str | None  # what the user named: offline model name, folder, or Hugging Face id (None: unknown, behind a router given by URL)
    roles: list[str]
    extra_args: list[str] = field(default_factory=list)
    port: int | None = None  # the server's port; with replicas, the router's
    model_path: str | None = None  # what SGLang loads; set when the group starts
    chat_template: str | None = None
    replicas: int = 1  # SGLang servers of this model; more than one: behind a router started with them
    router_url: str | None = None  # an existing router (or server) that serves these roles: nothing is started
    worker_ports: list[int] = field(default_factory=list)  # the replicas' ports (with replicas > 1)

    @property
    def name(self) -> str:
        return "+".join(self.roles)

    @property
    def routed(self) -> bool:
        """Whether the roles are served through a router (one we start, or one given by URL)."""
        return self.replicas > 1 or self.router_url is not None


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
    restarts: int = 0  # restarts so far
    restart_at: float | None = None  # when the next restart is due (the process is down)
    warming: bool = False  # restarted, not yet answering
    given_up: bool = False  # down for good: its restarts are spent
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

    @property
    def down(self) -> bool:
        """Dead, waiting for a restart, warming up after one, or given up."""
        return self.given_up or self.restart_at is not None or self.warming or not self.alive()

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


class ServerGroup:
    """The servers (and routers) of one launch. Use as a context manager: all stop on exit, also on errors.

    A role with `replicas` > 1 gets that many SGLang servers of its model behind one SGLang
    router (`sglang-router`, policy `router_policy`); the endpoints point the role at the
    router. A role given a `*_router_url` uses that router (or plain server) instead, and
    nothing is started for it.
    """

    def __init__(
        self,
        draft: str | None,
        target: str | None,
        judge: str | None = None,
        device: str = "auto",
        target_server_args: str = "",
        draft_server_args: str = "",
        judge_server_args: str = "",
        ports: list[int] | None = None,
        max_total_tokens: int = 16384,
        grammar_backend: str = "outlines",
        log_dir: Path | None = None,
        startup_timeout_s: float = 600.0,
        max_restarts: int = 3,
        restart_backoff_s: float = 2.0,
        log: Callable[[str], None] = print,
        target_replicas: int = 1,
        draft_replicas: int = 1,
        judge_replicas: int = 1,
        router_policy: str = "cache_aware",
        router_args: str = "",
        target_router_url: str | None = None,
        draft_router_url: str | None = None,
        judge_router_url: str | None = None,
        dtype: str = "auto",
    ):
        self.device = detect_device() if device == "auto" else device
        if self.device not in ("cpu", "cuda"):
            raise LookaheadError(f"device must be cpu, cuda or auto, got {device!r}")
        check_dtype(dtype)
        if self.device == "cuda" and dtype != "auto":
            raise LookaheadError("--dtype sets the dtype of CPU servers; on a GPU give --dtype in --target-server-args "
                                 "(and the draft's and judge's)")
        self.dtype = dtype
        self.cpu_flags = cpu_flags() if self.device == "cpu" else []
        if router_policy not in ROUTER_POLICIES:
            raise LookaheadError(f"router policy must be one of {', '.join(ROUTER_POLICIES)}, got {router_policy!r}")
        self.max_total_tokens = max_total_tokens
        self.grammar_backend = grammar_backend
        self.startup_timeout_s = startup_timeout_s
        self.max_restarts = max_restarts
        self.restart_backoff_s = restart_backoff_s
        self.router_policy = router_policy
        self.router_args = shlex.split(router_args)
        self.starting = False  # True while start() runs: a signal then stops at once
        self.log = log
        self.log_dir = log_dir or offline_weights.cache_root().parent / "logs"
        self.servers: list[ServerProcess] = []  # SGLang servers: alone, or replicas behind a router
        self.routers: list[ServerProcess] = []  # the routers this group started
        named = {"draft": draft, "target": target, "judge": judge or target}
        replicas = {"draft": draft_replicas, "target": target_replicas, "judge": judge_replicas}
        given_routers = {"draft": draft_router_url, "target": target_router_url,
                         "judge": judge_router_url or (target_router_url if judge is None else None)}
        role_args = {"draft": draft_server_args, "target": target_server_args, "judge": judge_server_args}
        for role in ROLES:
            if not isinstance(replicas[role], int) or replicas[role] < 1:
                raise LookaheadError(f"--{role}-replicas must be at least 1, got {replicas[role]}")
            if given_routers[role] is not None:
                given_routers[role] = self._router_url(role, given_routers[role])
                if replicas[role] > 1:
                    raise LookaheadError(f"--{role}-replicas and --{role}-router-url exclude each other: "
                                         "the router's workers are started elsewhere")
            elif named[role] is None:
                raise LookaheadError(f"give --{role} (a model) or --{role}-router-url (a running router)")
            else:
                check_model(named[role])
        self.specs: list[ServerSpec] = []
        for role in ("target", "draft", "judge"):  # the target first: the judge prefers to share it
            router = given_routers[role]
            spec = next((s for s in self.specs if (s.router_url == router if router else
                                                   s.router_url is None and s.model == named[role])), None)
            if spec is None:
                spec = ServerSpec(model=named[role], roles=[], router_url=router)
                self.specs.append(spec)
            spec.roles.append(role)
            if router is None:
                spec.extra_args += shlex.split(role_args[role])
                spec.replicas = max(spec.replicas, replicas[role])
        if any(spec.replicas > 1 for spec in self.specs):
            check_router_installed()
        needed = sum(self._processes(spec) for spec in self.started_specs)
        if ports:
            if len(ports) < needed:
                raise LookaheadError(f"{needed} servers and routers need {needed} ports, got {len(ports)}")
            for port in ports:
                if port_in_use(port):
                    raise LookaheadError(f"port {port} is already in use")
        given = iter(ports or [])
        for spec in self.started_specs:
            if spec.replicas > 1:
                spec.worker_ports = [next(given, None) for _ in range(spec.replicas)]
            spec.port = next(given, None)
        for spec in self.started_specs:
            choice = self.dtype_choice(spec)
            if choice and choice.warning:
                self.log(f"{spec.name}: {choice.warning}")

    @staticmethod
    def _router_url(role: str, url: str) -> str:
        try:
            return ServerAddress(url=url).url
        except ValueError:
            raise LookaheadError(f"--{role}-router-url must be an http(s) URL, got {url!r}") from None

    @staticmethod
    def _processes(spec: ServerSpec) -> int:
        """Processes a spec starts: one server, or its replicas and their router."""
        return 1 if spec.replicas == 1 else spec.replicas + 1

    @property
    def started_specs(self) -> list[ServerSpec]:
        """The specs this group starts processes for (not those served by a router given by URL)."""
        return [spec for spec in self.specs if spec.router_url is None]

    def dtype_choice(self, spec: ServerSpec) -> DtypeChoice | None:
        """The dtype of `spec`'s CPU servers and why (a --dtype in its server args wins); None on a GPU."""
        if self.device != "cpu":
            return None
        given = flag_values(spec.extra_args).get("--dtype")
        if given:
            return choose_cpu_dtype(given, self.cpu_flags, "given in the server args")
        return choose_cpu_dtype(self.dtype, self.cpu_flags)

    def command(self, spec: ServerSpec, port: int, replica: int = 0) -> list[str]:
        """The SGLang server command for `spec` on `port`; `replica` (1, 2, ...) when it is one of several."""
        cmd = [
            sys.executable, "-m", "sglang.launch_server",
            "--model-path", spec.model_path,
            "--host", "127.0.0.1", "--port", str(port),
        ]
        if "judge" in spec.roles and "--grammar-backend" not in spec.extra_args:
            cmd += ["--grammar-backend", self.grammar_backend]
        if self.device == "cpu":
            dtype = [] if "--dtype" in flag_values(spec.extra_args) else ["--dtype", self.dtype_choice(spec).dtype]
            cmd += [
                "--device", "cpu", *dtype,
                "--disable-overlap-schedule", "--sleep-on-idle",
                "--max-total-tokens", str(self.max_total_tokens),
            ]
        extra = spec.extra_args
        if self.device == "cuda" and replica and spec.replicas > 1:
            # replicas on one machine take disjoint GPUs: replica i starts at base + (i-1) × (tp × dp × pp)
            base = int(flag_values(extra).get("--base-gpu-id", 0))
            extra = [*without_flag(extra, "--base-gpu-id"),
                     "--base-gpu-id", str(base + (replica - 1) * gpus_per_server(extra))]
        return cmd + extra

    def _router_command(self, spec: ServerSpec, metrics_port: int | None = None) -> list[str]:
        urls = [f"http://127.0.0.1:{port}" for port in spec.worker_ports]
        return router_command(urls, spec.port, self.router_policy, metrics_port, self.router_args)

    def dry_run(self) -> list[str]:
        """The exact commands `start` would run (ports chosen now where none were given), nothing started."""
        lines = []
        env = "".join(f"{name}={shlex.quote(value)} " for name, value in self.cpu_variables().items())
        for spec in self.specs:
            if spec.router_url is not None:
                lines.append(f"# {spec.name}: the router at {spec.router_url} (started elsewhere; nothing to start)")
                continue
            model_path = (str(offline_weights.folder_of(spec.model)) if spec.model in offline_weights.MODEL_NAMES
                          else resolve_path(spec.model))
            planned = ServerSpec(spec.model, spec.roles, spec.extra_args, spec.port or free_port(), model_path,
                                 replicas=spec.replicas, worker_ports=[p or free_port() for p in spec.worker_ports])
            choice = self.dtype_choice(spec)
            why = f"\n# dtype: {choice}" if choice else ""
            if spec.replicas == 1:
                command = self.command(planned, planned.port)
                lines.append(f"# {spec.name} server ({spec.model}){why}\n{env}{shlex.join(command)}")
                continue
            for i, port in enumerate(planned.worker_ports, start=1):
                command = self.command(planned, port, replica=i)
                lines.append(f"# {spec.name} replica {i} of {spec.replicas} ({spec.model}){why}\n{env}{shlex.join(command)}")
            lines.append(f"# {spec.name} router ({self.router_policy} over {spec.replicas} replicas)\n"
                         f"{shlex.join(self._router_command(planned))}")
        return lines

    def cpu_variables(self) -> dict[str, str]:
        """What CPU servers get on top of the caller's environment (nothing on a GPU)."""
        if self.device != "cpu":
            return {}
        variables = {"SGLANG_USE_CPU_ENGINE": "1"}
        if "OMP_WAIT_POLICY" not in os.environ:
            variables["OMP_WAIT_POLICY"] = "PASSIVE"
        variables["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(cpu_stub_dir()), os.environ.get("PYTHONPATH")) if p)
        return variables

    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.cpu_variables()}

    def _spawn(self, command: list[str], env: dict[str, str] | None, log_path: Path) -> subprocess.Popen:
        with open(log_path, "ab") as log_file:
            return subprocess.Popen(
                dies_with_parent(command), env=env, stdout=log_file,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def _launch(self, spec: ServerSpec, kind: str, port: int, command: list[str], env: dict[str, str] | None,
                replica: int = 0, port_given: bool = False) -> ServerProcess:
        stem = spec.name + (f"-replica{replica}" if kind == "replica" else "-router" if kind == "router" else "")
        log_path = self.log_dir / f"{stem}-{port}.log"
        log_path.unlink(missing_ok=True)
        process = ServerProcess(spec, None, f"http://127.0.0.1:{port}", log_path, command, env, kind, replica,  # type: ignore[arg-type]
                                port_given=port_given)
        what = f"{spec.model}" if kind != "router" else f"{self.router_policy} over {spec.replicas} replicas"
        self.log(f"starting {process.label} ({what}) on 127.0.0.1:{port}, log {log_path}")
        choice = self.dtype_choice(spec) if kind != "router" else None
        if choice:
            self.log(f"{process.label} dtype: {choice}")
        process.process = self._spawn(command, env, log_path)
        return process

    def check_routers(self) -> None:
        """Fail at once, before anything starts, when a router given by URL does not answer at all."""
        for spec in self.specs:
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
            for spec in self.started_specs:
                spec.model_path, spec.chat_template = resolve_model(spec.model, self.log)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            env = self.environment()
            for spec in self.started_specs:
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
            for spec in self.started_specs:
                if spec.replicas > 1:
                    spec.port = spec.port or free_port()
                    self.routers.append(self._launch(spec, "router", spec.port, self._router_command(spec), None))
            self._wait_ready(self.routers, [s for s in self.specs if s.router_url is not None])
        finally:
            self.starting = False
        return self.endpoints()

    def _wait_ready(self, processes: list[ServerProcess], given: list[ServerSpec] = ()) -> None:
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

    def _replicas_of(self, spec: ServerSpec) -> list[ServerProcess]:
        return [s for s in self.servers if s.spec is spec]

    def supervise(self) -> None:
        """One look at every server and router: schedule, start and check restarts of the dead ones.

        A process gets `max_restarts` restarts, the first after `restart_backoff_s`, each next
        one after twice as long. A replica whose restarts are spent stays down while another
        replica of its model answers (the router sends requests to those). A draft or judge
        server (or router) whose restarts are spent stays down (runs degrade to target steps);
        a target server or router whose restarts are spent is an error, and so are target
        replicas that are all given up.
        """
        now = time.monotonic()
        for server in [*self.servers, *self.routers]:
            if server.given_up:
                continue
            if server.restart_at is None and not server.alive():
                reason = server.exit_reason()
                if server.restarts >= self.max_restarts:
                    server.given_up = True
                    self._give_up(server, reason)
                    continue
                delay = self.restart_backoff_s * 2 ** server.restarts
                server.restart_at, server.warming = now + delay, False
                self.log(f"the {server.label} died ({reason}); restarting in {delay:g} s "
                         f"(try {server.restarts + 1} of {self.max_restarts})")
            elif server.restart_at is not None and now >= server.restart_at:
                server.restarts += 1
                server.restart_at, server.warming = None, True
                server.process = self._spawn(server.command, server.env, server.log_path)
                self.log(f"restarting the {server.label} on {server.url}")
            elif server.warming and answers(server.url, timeout_s=1):
                server.warming = False
                self.log(f"the {server.label} is ready again at {server.url}")

    def _give_up(self, server: ServerProcess, reason: str) -> None:
        spent = f"the {server.label} died and {server.restarts} restarts failed"
        if server.kind == "replica":
            others = [s for s in self._replicas_of(server.spec) if not s.given_up]
            if others:
                self.log(f"{spent}; its router sends requests to the other {len(others)} ({reason})")
                return
        if "target" in server.spec.roles:
            raise LookaheadError(f"{spent}: {reason}")
        self.log(f"{spent}; runs go on with target steps only ({reason})")

    def restarting(self) -> list[str]:
        """Roles that cannot be served now: their server or router is down or warming up after a
        restart, or all their replicas are (one replica down behind a router is not a role down)."""
        roles = []
        for spec in self.started_specs:
            if spec.replicas == 1:
                down = any(s.down for s in self._replicas_of(spec))
            else:
                down = any(r.down for r in self.routers if r.spec is spec) or \
                    all(s.down for s in self._replicas_of(spec))
            if down:
                roles += spec.roles
        return [role for role in ROLES if role in roles]

    def _front(self, spec: ServerSpec) -> str:
        """The URL that serves `spec`'s roles: the given router, our router, or the one server."""
        if spec.router_url is not None:
            return spec.router_url
        return f"http://127.0.0.1:{spec.port}"

    def _served_dtype(self, spec: ServerSpec) -> str | None:
        """The dtype of the CPU servers this group started for `spec`; None for a router given by URL or a GPU."""
        choice = self.dtype_choice(spec) if spec.router_url is None else None
        return choice.dtype if choice else None

    def endpoints(self) -> Endpoints:
        by_role = {role: spec for spec in self.specs for role in spec.roles}
        return Endpoints(
            **{
                role: ServerAddress(
                    url=self._front(spec),
                    chat_template=spec.chat_template,
                    model=spec.model,
                    workers=[s.url for s in self._replicas_of(spec)] if spec.replicas > 1 else [],
                    dtype=self._served_dtype(spec),
                )
                for role, spec in by_role.items()
            },
            launcher_pid=os.getpid(),
            launcher_started=process_start_time(os.getpid()),
            restarting=self.restarting(),
        )

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
