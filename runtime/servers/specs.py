"""What to start: one spec per role (draft, target, judge), and the servers they come to.

One server per distinct model; a role whose model is already served shares that server (on a
small machine the target doubles as judge). A role given `replicas` > 1 gets that many SGLang
servers of its model and one SGLang router in front of them. A role given a `router_url` uses
that router (or plain server), and nothing is started for it.

CPU servers run in bfloat16 where the CPU has AMX-BF16 or AVX-512-BF16 and in float32 elsewhere
(cpu_dtype.py); `dtype` or a --dtype in a role's server args overrides that. GPU servers get
SGLang's own dtype.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lookahead_reasoning.runtime.servers.cpu_dtype import (
    DtypeChoice,
    check_dtype,
    choose_cpu_dtype,
    cpu_flags,
)
from lookahead_reasoning.runtime.servers.endpoints import ROLES, ServerAddress
from lookahead_reasoning.runtime.servers.processes import port_in_use
from lookahead_reasoning.runtime.servers.router import (
    ROUTER_POLICIES,
    check_router_installed,
)
from lookahead_reasoning.runtime.servers.server_models import (
    check_model,
    detect_device,
    flag_values,
)

from lookahead_reasoning.errors import LookaheadError


@dataclass
class RoleSpec:
    """What serves one role: a model to start (with its server flags and replicas), or a running router."""

    model: str | None = None  # offline model name, folder, or Hugging Face id; the judge's None: the target's
    server_args: str = ""  # extra SGLang server flags, as one shell string
    replicas: int = 1  # SGLang servers of the model; more than one: behind a router started with them
    router_url: str | None = None  # a running router (or server) that serves the role: nothing is started


@dataclass
class LaunchSpec:
    """What one launch starts: a spec per role and the settings its servers share.

    A role given as a string is `RoleSpec(model=that)`. The judge defaults to the target's
    model, sharing its server (or its router, when the target is given by URL).
    """

    draft: RoleSpec | str
    target: RoleSpec | str
    judge: RoleSpec | str = field(default_factory=RoleSpec)
    device: str = "auto"  # cpu, cuda or auto
    dtype: str = "auto"  # of CPU servers: auto, bfloat16 or float32
    max_total_tokens: int = 16384  # the KV pool of CPU servers
    grammar_backend: str = "outlines"  # of the judge's server
    router_policy: str = "cache_aware"  # of the routers started for replicas
    router_args: str = ""  # extra flags for those routers
    ports: list[int] | None = None  # one per server and router, in the order of the specs (None: free ports)

    def __post_init__(self) -> None:
        for role in ROLES:
            if isinstance(getattr(self, role), str):
                setattr(self, role, RoleSpec(model=getattr(self, role)))


@dataclass
class ServerSpec:
    """One model's servers: one SGLang server, or replicas behind a router, or a router given by URL."""

    model: str | None  # what the user named (None: unknown, behind a router given by URL)
    roles: list[str]
    extra_args: list[str] = field(default_factory=list)
    port: int | None = None  # the server's port; with replicas, the router's
    model_path: str | None = None  # what SGLang loads; set when the servers start
    chat_template: str | None = None
    replicas: int = 1
    router_url: str | None = None  # an existing router (or server) that serves these roles: nothing is started
    worker_ports: list[int] = field(default_factory=list)  # the replicas' ports (with replicas > 1)

    @property
    def name(self) -> str:
        return "+".join(self.roles)

    @property
    def routed(self) -> bool:
        """Whether the roles are served through a router (one we start, or one given by URL)."""
        return self.replicas > 1 or self.router_url is not None

    @property
    def processes(self) -> int:
        """Processes it starts: one server, or its replicas and their router (none for a router given by URL)."""
        if self.router_url is not None:
            return 0
        return 1 if self.replicas == 1 else self.replicas + 1


@dataclass
class ServerPlan:
    """The servers of one launch, checked: their specs (target first), the device and what they share."""

    specs: list[ServerSpec]
    device: str
    dtype: str
    cpu_flags: list[str]
    max_total_tokens: int
    grammar_backend: str
    router_policy: str
    router_args: list[str]

    @property
    def started_specs(self) -> list[ServerSpec]:
        """The specs that start processes (not those served by a router given by URL)."""
        return [spec for spec in self.specs if spec.router_url is None]

    def dtype_choice(self, spec: ServerSpec) -> DtypeChoice | None:
        """The dtype of `spec`'s CPU servers and why (a --dtype in its server args wins); None on a GPU."""
        if self.device != "cpu":
            return None
        given = flag_values(spec.extra_args).get("--dtype")
        if given:
            return choose_cpu_dtype(given, self.cpu_flags, "given in the server args")
        return choose_cpu_dtype(self.dtype, self.cpu_flags)


def plan(launch: LaunchSpec, log: Callable[[str], None] = print) -> ServerPlan:
    """Check `launch` and merge its roles into servers; logs a warning for a slow CPU dtype."""
    device = detect_device() if launch.device == "auto" else launch.device
    if device not in ("cpu", "cuda"):
        raise LookaheadError(f"device must be cpu, cuda or auto, got {launch.device!r}")
    check_dtype(launch.dtype)
    if device == "cuda" and launch.dtype != "auto":
        raise LookaheadError("--dtype sets the dtype of CPU servers; on a GPU give --dtype in --target-server-args "
                             "(and the draft's and judge's)")
    if launch.router_policy not in ROUTER_POLICIES:
        raise LookaheadError(f"router policy must be one of {', '.join(ROUTER_POLICIES)}, "
                             f"got {launch.router_policy!r}")
    result = ServerPlan(_merge(_roles(launch)), device, launch.dtype, cpu_flags() if device == "cpu" else [],
                        launch.max_total_tokens, launch.grammar_backend, launch.router_policy,
                        shlex.split(launch.router_args))
    if any(spec.replicas > 1 for spec in result.specs):
        check_router_installed()
    _assign_ports(result.started_specs, launch.ports)
    for spec in result.started_specs:
        choice = result.dtype_choice(spec)
        if choice and choice.warning:
            log(f"{spec.name}: {choice.warning}")
    return result


def _roles(launch: LaunchSpec) -> dict[str, RoleSpec]:
    """Each role's spec, checked, with the judge's defaults filled in from the target's."""
    judge, target = launch.judge, launch.target
    roles = {
        "draft": replace(launch.draft),
        "target": replace(target),
        "judge": RoleSpec(judge.model or target.model, judge.server_args, judge.replicas,
                          judge.router_url or (target.router_url if judge.model is None else None)),
    }
    for role, spec in roles.items():
        if not isinstance(spec.replicas, int) or spec.replicas < 1:
            raise LookaheadError(f"--{role}-replicas must be at least 1, got {spec.replicas}")
        if spec.router_url is not None:
            spec.router_url = _router_url(role, spec.router_url)
            if spec.replicas > 1:
                raise LookaheadError(f"--{role}-replicas and --{role}-router-url exclude each other: "
                                     "the router's workers are started elsewhere")
        elif spec.model is None:
            raise LookaheadError(f"give --{role} (a model) or --{role}-router-url (a running router)")
        else:
            check_model(spec.model)
    return roles


def _merge(roles: dict[str, RoleSpec]) -> list[ServerSpec]:
    """One server spec per distinct model (or router URL); the target first, since the judge prefers to share it."""
    specs: list[ServerSpec] = []
    for role in ("target", "draft", "judge"):
        given, router = roles[role], roles[role].router_url
        spec = next((s for s in specs if (s.router_url == router if router else
                                          s.router_url is None and s.model == given.model)), None)
        if spec is None:
            spec = ServerSpec(model=given.model, roles=[], router_url=router)
            specs.append(spec)
        spec.roles.append(role)
        if router is None:
            spec.extra_args += shlex.split(given.server_args)
            spec.replicas = max(spec.replicas, given.replicas)
    return specs


def _assign_ports(specs: list[ServerSpec], ports: list[int] | None) -> None:
    """Give the started specs the ports the user named, in order; the rest are chosen when they start."""
    needed = sum(spec.processes for spec in specs)
    if ports:
        if len(ports) < needed:
            raise LookaheadError(f"{needed} servers and routers need {needed} ports, got {len(ports)}")
        for port in ports:
            if port_in_use(port):
                raise LookaheadError(f"port {port} is already in use")
    given = iter(ports or [])
    for spec in specs:
        if spec.replicas > 1:
            spec.worker_ports = [next(given, None) for _ in range(spec.replicas)]
        spec.port = next(given, None)


def _router_url(role: str, url: str) -> str:
    try:
        return ServerAddress(url=url).url
    except ValueError:
        raise LookaheadError(f"--{role}-router-url must be an http(s) URL, got {url!r}") from None
