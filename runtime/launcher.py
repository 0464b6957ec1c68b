"""Start, health-check and stop the SGLang servers for the three roles.

One server per distinct model; a role whose model is already served shares that
server (on a small machine the target doubles as judge). Each server runs in its own
process group and is stopped by that group's id, never by name.

CPU mode (DESIGN §8) sets SGLANG_USE_CPU_ENGINE=1, float32, --sleep-on-idle (an idle
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
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import requests

from lookahead_reasoning.runtime import models as offline_models
from lookahead_reasoning.runtime.endpoints import ROLES, Endpoint, Endpoints
from lookahead_reasoning.runtime.errors import LookaheadError

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
    path = Path(model).expanduser()
    return (str(path.resolve()), None) if path.exists() else (model, None)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


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

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float = 20.0) -> None:
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(10)

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
        log: Callable[[str], None] = print,
    ):
        self.device = detect_device() if device == "auto" else device
        if self.device not in ("cpu", "cuda"):
            raise LookaheadError(f"device must be cpu, cuda or auto, got {device!r}")
        self.max_total_tokens = max_total_tokens
        self.grammar_backend = grammar_backend
        self.startup_timeout_s = startup_timeout_s
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

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.device == "cpu":
            env["SGLANG_USE_CPU_ENGINE"] = "1"
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_cpu_stub_dir()), env.get("PYTHONPATH")) if p)
        return env

    def start(self) -> Endpoints:
        """Prepare offline models, start every server and wait until all answer."""
        for spec in self.specs:
            spec.model_path, spec.chat_template = resolve_model(spec.model, self.log)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = self.environment()
        for spec in self.specs:
            port = spec.port or free_port()
            log_path = self.log_dir / f"{'+'.join(spec.roles)}-{port}.log"
            self.log(f"starting {'+'.join(spec.roles)} server ({spec.model}) on 127.0.0.1:{port}, log {log_path}")
            with open(log_path, "wb") as log_file:
                process = subprocess.Popen(
                    self.command(spec, port), env=env, stdout=log_file, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )
            server = ServerProcess(spec, process, f"http://127.0.0.1:{port}", log_path)
            self.servers.append(server)
            for role in spec.roles:
                self.role_server[role] = server
        self._wait_ready()
        return self.endpoints()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        pending = list(self.servers)
        while pending:
            for server in list(pending):
                if not server.alive():
                    raise LookaheadError(
                        f"the {'+'.join(server.spec.roles)} server exited during start-up: {server.last_log_line()}"
                    )
                try:
                    if requests.get(server.url + "/model_info", timeout=5).status_code == 200:
                        self.log(f"{'+'.join(server.spec.roles)} server ready at {server.url}")
                        pending.remove(server)
                except requests.RequestException:
                    pass
            if pending and time.monotonic() > deadline:
                raise LookaheadError(f"servers did not start within {self.startup_timeout_s:g} s")
            if pending:
                time.sleep(1.0)

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
        )

    def dead_servers(self) -> list[ServerProcess]:
        return [s for s in self.servers if not s.alive()]

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


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (an exited child that is not yet reaped does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def stop_launcher(endpoints: Endpoints, timeout_s: float = 60.0) -> None:
    """Ask the launcher that wrote `endpoints` to stop its servers, and wait for it."""
    pid = endpoints.launcher_pid
    if pid is None:
        raise LookaheadError("the endpoints file names no launcher process")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        raise LookaheadError(f"launcher process {pid} is not running") from None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _running(pid):
            return
        time.sleep(0.5)
    raise LookaheadError(f"launcher process {pid} did not stop within {timeout_s:g} s")
