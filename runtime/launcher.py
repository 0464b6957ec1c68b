"""Start, health-check and stop the SGLang servers for the three roles.

One server per distinct model; a role whose model is already served shares that
server (on a small machine the target doubles as judge). Each server runs in its own
process group and is stopped by that group's id, never by name.

CPU mode (docs/cpu.md) sets SGLANG_USE_CPU_ENGINE=1, float32, --sleep-on-idle (an idle
scheduler otherwise spins a whole core), --disable-overlap-schedule and a bounded KV
pool, and puts an empty `common_ops` module on the server's PYTHONPATH: sgl_kernel
imports it unconditionally and finds no CUDA library on a CPU-only machine. That
module is a stand-in that lets the CPU server start, not a feature.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lookahead_reasoning.runtime import offline_models
from lookahead_reasoning.runtime.endpoints import ROLES, Endpoint, Endpoints
from lookahead_reasoning.runtime.errors import LookaheadError
from lookahead_reasoning.runtime.processes import (
    answers, dies_with_parent, free_port, port_in_use, process_start_time, running, stop_group,
)

HF_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


@dataclass
class ServerSpec:
    model: str  # what the user named: offline model name, folder, or Hugging Face id
    roles: list[str]
    extra_args: list[str] = field(default_factory=list)
    port: int | None = None
    model_path: str | None = None  # what SGLang loads; set when the group starts
    chat_template: str | None = None


def check_model(model: str) -> None:
    """Fail early, before anything is prepared or started, on a model that cannot be served."""
    if model in offline_models.MODEL_NAMES:
        return
    path = Path(model).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise LookaheadError(f"model folder {path} has no config.json")
        return
    if HF_ID.match(model) and not model.startswith("."):
        return
    if model.startswith(("/", ".", "~")) or os.sep in model:
        raise LookaheadError(f"model folder {model} does not exist")
    raise LookaheadError(
        f"unknown model {model!r}: give a folder, a Hugging Face id, or one of {', '.join(offline_models.MODEL_NAMES)}"
    )


def resolve_model(model: str, log: Callable[[str], None]) -> tuple[str, str | None]:
    """(model path for SGLang, frontend chat template name or None)."""
    check_model(model)
    if model in offline_models.MODEL_NAMES:
        log(f"preparing offline model {model}")
        return str(offline_models.prepare(model, log=log)), offline_models.chat_template_for(model)
    return resolve_path(model), None


def resolve_path(model: str) -> str:
    """A model folder as an absolute path; a Hugging Face id as it is."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def detect_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


def _cpu_stub_dir() -> Path:
    stub = offline_models.cache_root().parent / "cpu-stub"
    stub.mkdir(parents=True, exist_ok=True)
    module = stub / "common_ops.py"
    if not module.exists():
        module.write_text('"""Empty stand-in for sgl_kernel\'s CUDA ops on a CPU-only machine (see launcher)."""\n')
    return stub


@dataclass
class ServerProcess:
    spec: ServerSpec
    process: subprocess.Popen
    url: str
    log_path: Path
    restarts: int = 0  # restarts so far
    restart_at: float | None = None  # when the next restart is due (the server is down)
    warming: bool = False  # restarted, not yet answering
    given_up: bool = False  # down for good: its restarts are spent

    @property
    def name(self) -> str:
        return "+".join(self.spec.roles)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float = 20.0) -> None:
        stop_group(self.process, grace_s)

    def exit_reason(self) -> str:
        code = self.process.returncode
        if code is not None and code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit status {code}: {self.last_log_line()}"

    def last_log_line(self) -> str:
        try:
            lines = [l for l in self.log_path.read_text(errors="replace").splitlines() if l.strip()]
        except OSError:
            return ""
        errors = [l for l in lines if "Error" in l or "error" in l]
        return (errors or lines or [""])[-1].strip()[:300]


class ServerGroup:
    """The servers of one launch. Use as a context manager: servers stop on exit, also on errors."""

    def __init__(
        self,
        draft: str,
        target: str,
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
    ):
        self.device = detect_device() if device == "auto" else device
        if self.device not in ("cpu", "cuda"):
            raise LookaheadError(f"device must be cpu, cuda or auto, got {device!r}")
        self.max_total_tokens = max_total_tokens
        self.grammar_backend = grammar_backend
        self.startup_timeout_s = startup_timeout_s
        self.max_restarts = max_restarts
        self.restart_backoff_s = restart_backoff_s
        self.starting = False  # True while start() runs: a signal then stops at once
        self.log = log
        self.log_dir = log_dir or offline_models.cache_root().parent / "logs"
        self.servers: list[ServerProcess] = []
        self.role_server: dict[str, ServerProcess] = {}
        named = {"draft": draft, "target": target, "judge": judge or target}
        role_args = {"draft": draft_server_args, "target": target_server_args, "judge": judge_server_args}
        for model in named.values():
            check_model(model)
        distinct = len(set(named.values()))
        if ports:
            if len(ports) < distinct:
                raise LookaheadError(f"{distinct} servers need {distinct} ports, got {len(ports)}")
            for port in ports:
                if port_in_use(port):
                    raise LookaheadError(f"port {port} is already in use")
        self.specs: list[ServerSpec] = []
        for role in ("target", "draft", "judge"):  # the target first: the judge prefers to share it
            spec = next((s for s in self.specs if s.model == named[role]), None)
            if spec is None:
                spec = ServerSpec(model=named[role], roles=[])
                self.specs.append(spec)
            spec.roles.append(role)
            spec.extra_args += shlex.split(role_args[role])
        for spec, port in zip(self.specs, ports or []):
            spec.port = port

    def command(self, spec: ServerSpec, port: int) -> list[str]:
        cmd = [
            sys.executable, "-m", "sglang.launch_server",
            "--model-path", spec.model_path,
            "--host", "127.0.0.1", "--port", str(port),
        ]
        if "judge" in spec.roles and "--grammar-backend" not in spec.extra_args:
            cmd += ["--grammar-backend", self.grammar_backend]
        if self.device == "cpu":
            cmd += [
                "--device", "cpu", "--dtype", "float32",
                "--disable-overlap-schedule", "--sleep-on-idle",
                "--max-total-tokens", str(self.max_total_tokens),
            ]
        return cmd + spec.extra_args

    def dry_run(self) -> list[str]:
        """The exact commands `start` would run (ports chosen now where none were given), nothing started."""
        lines = []
        for spec in self.specs:
            model_path = (str(offline_models.folder_of(spec.model)) if spec.model in offline_models.MODEL_NAMES
                          else resolve_path(spec.model))
            port = spec.port or free_port()
            env = "SGLANG_USE_CPU_ENGINE=1 PYTHONPATH=" + shlex.quote(str(_cpu_stub_dir())) + " " \
                if self.device == "cpu" else ""
            command = self.command(ServerSpec(spec.model, spec.roles, spec.extra_args, port, model_path), port)
            lines.append(f"# {'+'.join(spec.roles)} server ({spec.model})\n{env}{shlex.join(command)}")
        return lines

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.device == "cpu":
            env["SGLANG_USE_CPU_ENGINE"] = "1"
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_cpu_stub_dir()), env.get("PYTHONPATH")) if p)
        return env

    def _spawn(self, spec: ServerSpec, port: int, log_path: Path) -> subprocess.Popen:
        with open(log_path, "ab") as log_file:
            return subprocess.Popen(
                dies_with_parent(self.command(spec, port)), env=self.environment(), stdout=log_file,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def start(self) -> Endpoints:
        """Prepare offline models, start every server and wait until all answer."""
        self.starting = True
        try:
            for spec in self.specs:
                spec.model_path, spec.chat_template = resolve_model(spec.model, self.log)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            for spec in self.specs:
                port = spec.port = spec.port or free_port()
                log_path = self.log_dir / f"{'+'.join(spec.roles)}-{port}.log"
                log_path.unlink(missing_ok=True)
                self.log(f"starting {'+'.join(spec.roles)} server ({spec.model}) on 127.0.0.1:{port}, log {log_path}")
                server = ServerProcess(spec, self._spawn(spec, port, log_path), f"http://127.0.0.1:{port}", log_path)
                self.servers.append(server)
                for role in spec.roles:
                    self.role_server[role] = server
            self._wait_ready()
        finally:
            self.starting = False
        return self.endpoints()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        pending = list(self.servers)
        while pending:
            for server in list(pending):
                if not server.alive():
                    raise LookaheadError(f"the {server.name} server exited during start-up: {server.last_log_line()}")
                if answers(server.url, timeout_s=5):
                    self.log(f"{server.name} server ready at {server.url}")
                    pending.remove(server)
            if pending and time.monotonic() > deadline:
                raise LookaheadError(f"servers did not start within {self.startup_timeout_s:g} s")
            if pending:
                time.sleep(1.0)

    def supervise(self) -> None:
        """One look at every server: schedule, start and check restarts of the dead ones.

        A server gets `max_restarts` restarts, the first after `restart_backoff_s`, each next
        one after twice as long. A draft or judge server whose restarts are spent stays down
        (runs degrade to target steps); a target server whose restarts are spent is an error.
        """
        now = time.monotonic()
        for server in self.servers:
            if server.given_up:
                continue
            if server.restart_at is None and not server.alive():
                reason = server.exit_reason()
                if server.restarts >= self.max_restarts:
                    if "target" in server.spec.roles:
                        raise LookaheadError(f"the {server.name} server died and {server.restarts} restarts failed: {reason}")
                    server.given_up = True
                    self.log(f"the {server.name} server died and {server.restarts} restarts failed; "
                             f"runs go on with target steps only ({reason})")
                    continue
                delay = self.restart_backoff_s * 2 ** server.restarts
                server.restart_at, server.warming = now + delay, False
                self.log(f"the {server.name} server died ({reason}); restarting in {delay:g} s "
                         f"(try {server.restarts + 1} of {self.max_restarts})")
            elif server.restart_at is not None and now >= server.restart_at:
                server.restarts += 1
                server.restart_at, server.warming = None, True
                server.process = self._spawn(server.spec, server.spec.port, server.log_path)
                self.log(f"restarting the {server.name} server on {server.url}")
            elif server.warming and answers(server.url, timeout_s=1):
                server.warming = False
                self.log(f"the {server.name} server is ready again at {server.url}")

    def restarting(self) -> list[str]:
        """Roles whose server is down or warming up after a restart."""
        return [role for s in self.servers if s.restart_at is not None or s.warming or s.given_up for role in s.spec.roles]

    def endpoints(self) -> Endpoints:
        return Endpoints(
            **{
                role: Endpoint(
                    url=self.role_server[role].url,
                    chat_template=self.role_server[role].spec.chat_template,
                    model=self.role_server[role].spec.model,
                )
                for role in ROLES
            },
            launcher_pid=os.getpid(),
            launcher_started=process_start_time(os.getpid()),
            restarting=self.restarting(),
        )

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

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
    process (the launcher died and the PID was reused) is not signalled.
    """
    pid = endpoints.launcher_pid
    if pid is None:
        raise LookaheadError("the endpoints file names no launcher process")
    started = process_start_time(pid)
    if started is None or not running(pid):
        raise LookaheadError(f"launcher process {pid} is not running")
    if endpoints.launcher_started is not None and started != endpoints.launcher_started:
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
