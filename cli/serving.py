"""Serving commands: `lookahead launch`, `stop`, `serve` and `weights prepare`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lookahead_reasoning.cli.options import (
    DEFAULT_VERIFIER, ApiKey, ChatTemplate, Depth, Device, DraftUrl, EndpointsFile, Engine, JudgeUrl, TargetUrl,
    Threshold, Verifier, Width, depth_options, endpoints_from, err, make_config, number_list,
)
from lookahead_reasoning.runtime.servers import offline_weights
from lookahead_reasoning.runtime.servers.endpoints import default_endpoints_path, load_endpoints
from lookahead_reasoning.errors import LookaheadError, validated

weights_app = typer.Typer(help="Offline weights for machines without the Hugging Face hub.", no_args_is_help=True)


def launch(
    draft: Optional[str] = typer.Option(None, help="draft model: folder, Hugging Face id, or an offline name"),
    target: Optional[str] = typer.Option(None, help="target model (optional with --target-router-url)"),
    judge: Optional[str] = typer.Option(None, help="judge model (default: the target, sharing its server or router)"),
    device: Device = "auto",
    endpoints: Optional[Path] = typer.Option(None, help="where to write the endpoints file"),
    target_server_args: str = typer.Option("", help='extra SGLang server flags for the target, e.g. "--speculative-algorithm NGRAM"'),
    draft_server_args: str = typer.Option("", help="extra SGLang server flags for the draft"),
    judge_server_args: str = typer.Option("", help="extra SGLang server flags for the judge"),
    target_replicas: int = typer.Option(1, help="target servers; more than 1 start behind one SGLang router"),
    draft_replicas: int = typer.Option(1, help="draft servers; more than 1 start behind one SGLang router"),
    judge_replicas: int = typer.Option(1, help="judge servers, when the judge is its own model"),
    router_policy: str = typer.Option("cache_aware", help="policy of the routers started for replicas: "
                                      "cache_aware (a prefix goes where it is cached), round_robin, random, power_of_two"),
    router_args: str = typer.Option("", help='extra flags for those routers, e.g. "--cache-threshold 0.5"'),
    target_router_url: Optional[str] = typer.Option(None, help="use this running SGLang router (or server) for the "
                                                    "target, and the judge when it shares the target; start nothing for it"),
    draft_router_url: Optional[str] = typer.Option(None, help="use this running router (or server) for the draft"),
    judge_router_url: Optional[str] = typer.Option(None, help="use this running router (or server) for the judge"),
    ports: Optional[str] = typer.Option(None, help="comma-separated ports, one per server and router, in --dry-run's "
                                        "order (default: free ports)"),
    max_total_tokens: int = typer.Option(16384, help="KV pool size in CPU mode"),
    dtype: str = typer.Option("auto", help="dtype of CPU servers: auto (bfloat16 where the CPU has AMX-BF16 or "
                              "AVX-512-BF16, else float32), bfloat16 or float32; a --dtype in --*-server-args wins"),
    grammar_backend: str = typer.Option("outlines", help="grammar backend of the judge's server (outlines or xgrammar)"),
    max_restarts: int = typer.Option(3, min=0, help="restarts of one dead server before the launcher gives up on it"),
    restart_backoff: float = typer.Option(2.0, min=0.0, help="seconds before the first restart; doubled for each next one"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the exact server and router commands and start nothing"),
):
    """Start SGLang servers for the three roles and supervise them; stop them with Ctrl-C or `lookahead stop`.

    A dead draft or judge server is restarted (runs meanwhile degrade to target steps); a dead
    target is restarted too, and runs in flight get an error. After --max-restarts tries the
    launcher gives up on a draft or judge server (runs stay degraded), or stops on a target.

    Replicas: --target-replicas N starts N target servers and one SGLang router in front of
    them (the router extra: pip install sglang-router==0.3.2); the endpoints file points the target
    (and the judge it serves) at the router. A dead replica is restarted while the router
    sends requests to the others. --target-router-url URL uses a router you started
    (`python -m sglang_router.launch_router --worker-urls ...`) instead.
    """
    from lookahead_reasoning.runtime.servers.specs import LaunchSpec, RoleSpec
    from lookahead_reasoning.runtime.servers.starting import ServerGroup
    from lookahead_reasoning.runtime.servers.supervision import run_launch

    launch_spec = LaunchSpec(
        draft=RoleSpec(draft, draft_server_args, draft_replicas, draft_router_url),
        target=RoleSpec(target, target_server_args, target_replicas, target_router_url),
        judge=RoleSpec(judge, judge_server_args, judge_replicas, judge_router_url),
        device=device, dtype=dtype, max_total_tokens=max_total_tokens, grammar_backend=grammar_backend,
        router_policy=router_policy, router_args=router_args,
        ports=number_list(ports, "ports", int, minimum=1) if ports else None,
    )
    group = ServerGroup(launch_spec, log=lambda m: err.print(m, highlight=False, soft_wrap=True))
    if dry_run:
        print("\n".join(group.dry_run()))
        return
    run_launch(
        group, endpoints or default_endpoints_path(), max_restarts=max_restarts, restart_backoff_s=restart_backoff,
        on_ready=lambda path: err.print(f"[green]servers ready[/]; endpoints written to {path}. "
                                        "Ctrl-C or `lookahead stop` stops them."),
        on_stopping=lambda: err.print("stopping servers"),
    )


def stop(endpoints: EndpointsFile = None):
    """Stop the servers of a running `lookahead launch`."""
    from lookahead_reasoning.runtime.servers.supervision import stop_launcher

    stop_launcher(load_endpoints(endpoints or default_endpoints_path()))
    err.print("servers stopped")


@weights_app.command("prepare")
def weights_prepare(name: str = typer.Argument(..., help=f"one of: {', '.join(offline_weights.MODEL_NAMES)}")):
    """Build an offline weights folder and print its path."""
    print(offline_weights.prepare(name, log=lambda m: err.print(m)))


def serve(
    endpoints: EndpointsFile = None,
    draft_url: DraftUrl = None,
    target_url: TargetUrl = None,
    judge_url: JudgeUrl = None,
    chat_template: ChatTemplate = None,
    host: str = typer.Option("127.0.0.1", help="bind address (beyond loopback an API key is required)"),
    port: int = typer.Option(8000, help="port"),
    engine: Engine = "sync",
    depth: Depth = "adaptive",
    width: Width = 1,
    verifier: Verifier = DEFAULT_VERIFIER,
    threshold: Threshold = None,
    max_concurrent: int = typer.Option(4, help="requests that run at once; the rest wait"),
    queue_timeout: float = typer.Option(30.0, help="seconds a request may wait for a slot before 429 "
                                 "(0: never wait, a free slot at once or 429)"),
    request_timeout: float = typer.Option(600.0, help="seconds a request may run before 504"),
    max_tokens_cap: int = typer.Option(4096, help="largest max_tokens a request may ask for"),
    max_body_bytes: int = typer.Option(1 << 20, help="largest request body in bytes; a larger one gets 413"),
    api_key: ApiKey = None,
    reasoning_parser: Optional[str] = typer.Option(
        None, help="split a think section into reasoning_content with SGLang's reasoning parser of this name "
        "(e.g. deepseek-r1, qwen3), as SGLang's server does"),
):
    """Serve an OpenAI-compatible API that answers with lookahead reasoning."""
    from lookahead_reasoning.runtime.servers.processes import port_in_use
    from lookahead_reasoning.runtime.serve import ServeSettings

    config = make_config(**depth_options(depth), width=width, engine=engine, verifier=verifier, verifier_threshold=threshold,
                         max_tokens=max_tokens_cap, request_timeout_s=min(request_timeout, 300.0))
    settings = validated(ServeSettings, max_concurrent=max_concurrent, queue_timeout_s=queue_timeout,
                         request_timeout_s=request_timeout, max_tokens_cap=max_tokens_cap,
                         max_body_bytes=max_body_bytes, api_key=api_key, reasoning_parser=reasoning_parser,
                         endpoints_file=None if draft_url or target_url or judge_url
                         else endpoints or default_endpoints_path())
    if reasoning_parser:
        from lookahead_reasoning.runtime.serve.text import check_reasoning_parser

        check_reasoning_parser(reasoning_parser)  # before connecting: a wrong name is one line, at once
    if port_in_use(port, host):
        raise LookaheadError(f"port {port} is already in use")
    server_set = endpoints_from(endpoints, draft_url, target_url, judge_url, chat_template)
    from lookahead_reasoning.runtime.servers.connection import Connection
    from lookahead_reasoning.runtime.serve import serve as run_server

    connection = Connection(server_set, config)
    err.print(f"serving lookahead reasoning on http://{host}:{port}/v1 (models: lookahead, target)")
    run_server(connection, config, settings, host, port)
