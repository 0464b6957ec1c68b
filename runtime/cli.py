"""The `lookahead` command line."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Optional

import click
import typer
from rich.console import Console

from lookahead_reasoning.eval.commands import eval_command, sweep_command, verifiers_app
from lookahead_reasoning.runtime import models as offline_models
from lookahead_reasoning.runtime.display import RoundPrinter, print_answer, print_comparison, run_json
from lookahead_reasoning.runtime.endpoints import (
    default_endpoints_path,
    load_endpoints,
    save_endpoints,
)
from lookahead_reasoning.runtime.cli_common import depth_options, endpoints_from, err, floats_option, make_config, validated
from lookahead_reasoning.runtime.errors import LookaheadError, first_line
from lookahead_reasoning.runtime.launcher import ServerGroup, stop_launcher
from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

app = typer.Typer(
    help="Lookahead reasoning on SGLang servers.", no_args_is_help=True, add_completion=False,
    pretty_exceptions_enable=False,
)
models_app = typer.Typer(help="Offline models for machines without the Hugging Face hub.", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.add_typer(verifiers_app, name="verifiers")
app.command("eval")(eval_command)
app.command("sweep")(sweep_command)

DEMO_QUESTION = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)


@app.command()
def run(
    question: str = typer.Argument(..., help="the question to answer"),
    endpoints: Optional[Path] = typer.Option(None, help="endpoints file written by `lookahead launch`"),
    draft_url: Optional[str] = typer.Option(None, help="draft SGLang server URL"),
    target_url: Optional[str] = typer.Option(None, help="target SGLang server URL"),
    judge_url: Optional[str] = typer.Option(None, help="judge SGLang server URL (default: the target's)"),
    chat_template: Optional[str] = typer.Option(None, help="SGLang chat template name for --*-url servers"),
    depth: str = typer.Option("4", help="γ: draft steps per round, or 'adaptive'"),
    width: int = typer.Option(1, help="W: draft candidates per position (tree drafting when > 1)"),
    engine: str = typer.Option("sync", help="sync, or async (drafting overlaps verification)"),
    max_tokens: int = typer.Option(1024, help="cap on the answer's tokens"),
    max_step_tokens: int = typer.Option(100, help="cap on one step's tokens"),
    verifier: str = typer.Option("llm-judge", help="llm-judge, exact, embedding, embedding-numbers, random, target-score"),
    threshold: Optional[float] = typer.Option(None, help="verifier threshold (default: calibrated, else the verifier's default)"),
    temperature: float = typer.Option(0.0, help="sampling temperature of draft and target"),
    timeout: float = typer.Option(300.0, help="seconds one server request may take"),
    baseline: bool = typer.Option(False, "--baseline", help="also run the target alone (AR) and report the speedup"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object to stdout"),
):
    """Answer QUESTION with lookahead reasoning."""
    if not question.strip():
        raise LookaheadError("the question is empty")
    sampling = {"temperature": temperature}
    config = make_config(
        **depth_options(depth), width=width, engine=engine, max_tokens=max_tokens, max_step_tokens=max_step_tokens, judge_threshold=threshold,
        verifier=verifier, draft_sampling=sampling, target_sampling=sampling, request_timeout_s=timeout,
    )
    reasoner = LookaheadReasoner(endpoints_from(endpoints, draft_url, target_url, judge_url, chat_template), config)
    printer = RoundPrinter(err)
    result = reasoner.run(question, on_round=printer)
    base = None
    if baseline:
        err.print("[bold]running the target alone (AR baseline)…[/]")
        base = reasoner.baseline(question)
    if as_json:
        print(json.dumps(run_json(result, base)))
    else:
        print_answer(Console(), result, base)


@app.command()
def launch(
    draft: str = typer.Option(..., help="draft model: folder, Hugging Face id, or an offline name"),
    target: str = typer.Option(..., help="target model"),
    judge: Optional[str] = typer.Option(None, help="judge model (default: the target, sharing its server)"),
    device: str = typer.Option("auto", help="cpu, cuda or auto"),
    endpoints: Optional[Path] = typer.Option(None, help="where to write the endpoints file"),
    target_server_args: str = typer.Option("", help='extra SGLang server flags for the target, e.g. "--speculative-algorithm NGRAM"'),
    draft_server_args: str = typer.Option("", help="extra SGLang server flags for the draft"),
    judge_server_args: str = typer.Option("", help="extra SGLang server flags for the judge"),
    ports: Optional[str] = typer.Option(None, help="comma-separated ports, one per server (default: free ports)"),
    max_total_tokens: int = typer.Option(16384, help="KV pool size in CPU mode"),
    grammar_backend: str = typer.Option("outlines", help="grammar backend of the judge's server (outlines or xgrammar)"),
):
    """Start SGLang servers for the three roles; stop them with Ctrl-C or `lookahead stop`."""
    port_list = [int(p) for p in ports.split(",")] if ports else None
    path = endpoints or default_endpoints_path()
    group = ServerGroup(
        draft, target, judge, device=device, target_server_args=target_server_args,
        draft_server_args=draft_server_args, judge_server_args=judge_server_args, ports=port_list,
        max_total_tokens=max_total_tokens, grammar_backend=grammar_backend, log=lambda m: err.print(m),
    )
    stopping = {"flag": False}

    def on_signal(signum, frame):
        stopping["flag"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        save_endpoints(group.start(), path)
        err.print(f"[green]servers ready[/]; endpoints written to {path}. Ctrl-C or `lookahead stop` stops them.")
        while not stopping["flag"]:
            dead = group.dead_servers()
            if dead:
                raise LookaheadError(
                    f"the {'+'.join(dead[0].spec.roles)} server died: {dead[0].last_log_line()}"
                )
            time.sleep(1.0)
        err.print("stopping servers")
    finally:
        group.stop()
        if path.exists() and load_endpoints(path).launcher_pid == os.getpid():
            path.unlink()


@app.command()
def stop(endpoints: Optional[Path] = typer.Option(None, help="endpoints file written by `lookahead launch`")):
    """Stop the servers of a running `lookahead launch`."""
    stop_launcher(load_endpoints(endpoints or default_endpoints_path()))
    err.print("servers stopped")


@models_app.command("prepare")
def models_prepare(name: str = typer.Argument(..., help=f"one of: {', '.join(offline_models.MODEL_NAMES)}")):
    """Build an offline model folder and print its path."""
    print(offline_models.prepare(name, log=lambda m: err.print(m)))


@app.command()
def demo(
    draft: str = typer.Option("qwen2.5-coder-0.5b", help="draft model"),
    target: str = typer.Option("qwen2.5-coder-1.5b", help="target model (also the judge)"),
    question: str = typer.Option(DEMO_QUESTION, help="the question"),
    depth: int = typer.Option(2, help="γ"),
    max_tokens: int = typer.Option(320, help="cap on the answer's tokens"),
    max_step_tokens: int = typer.Option(80, help="cap on one step's tokens"),
    threshold: float = typer.Option(0.7, help="judge threshold on P(yes)"),
    device: str = typer.Option("auto", help="cpu, cuda or auto"),
):
    """Prepare models, launch servers, answer one question with LR and with AR, and stop."""
    started = time.perf_counter()
    config = make_config(depth=depth, max_tokens=max_tokens, max_step_tokens=max_step_tokens, judge_threshold=threshold)
    group = ServerGroup(draft, target, device=device, log=lambda m: err.print(m))
    try:
        with err.status("preparing models and starting servers (about a minute per server on a CPU)…"):
            group.start()
        if group.device == "cpu":
            err.print(
                "[yellow]CPU mode: the target's parallel branches and the judge cost real time here, "
                "so lookahead reasoning is slower than the target alone on a CPU by construction; "
                "on a GPU a batch of branches costs about as much as one. Watch the acceptance rate.[/]"
            )
        reasoner = LookaheadReasoner(group.endpoints(), config)
        err.print(f"[bold]question:[/] {question}")
        with err.status("lookahead reasoning…"):
            result = reasoner.run(question, on_round=RoundPrinter(err))
        with err.status("the target alone (AR baseline)…"):
            base = reasoner.baseline(question)
        print_answer(Console(), result, base)
        print_comparison(Console(), result, base)
    finally:
        group.stop()
    err.print(f"demo finished in {time.perf_counter() - started:.0f} s")


@app.command()
def bench(
    sim: bool = typer.Option(False, "--sim", help="the scheduling grid on simulated servers with GPU-like timing"),
    serve_load: bool = typer.Option(False, "--serve", help="a load check of `lookahead serve`, LR and AR"),
    url: Optional[str] = typer.Option(None, help="--serve: a running frontend on loopback (default: start one on simulated servers)"),
    requests_n: int = typer.Option(16, "--requests", help="--serve: requests per model"),
    concurrency: int = typer.Option(8, help="--serve: requests in flight at once"),
    max_concurrent: int = typer.Option(4, help="--serve without --url: the frontend's concurrency limit"),
    queue_timeout: float = typer.Option(30.0, help="--serve without --url: the frontend's queue timeout"),
    time_limit: float = typer.Option(300.0, help="--serve: stop sending after this many seconds per model"),
    api_key: Optional[str] = typer.Option(None, envvar="LOOKAHEAD_API_KEY", help="--serve: bearer token"),
    quick: bool = typer.Option(False, "--quick", help="a small subset of the grid (a few minutes)"),
    alphas: Optional[str] = typer.Option(None, help="α values, e.g. 0.4,0.6,0.8"),
    cs: Optional[str] = typer.Option(None, help="c values, e.g. 0.05,0.1,0.25"),
    depths: Optional[str] = typer.Option(None, help="γ values and/or 'adaptive', e.g. 1,2,4,adaptive"),
    widths: Optional[str] = typer.Option(None, help="W values, e.g. 1,2,4"),
    engines: Optional[str] = typer.Option(None, help="sync,async"),
    problems: int = typer.Option(2, help="simulated problems per point"),
    target_ms: float = typer.Option(20.0, help="simulated target decode time per token (ms); judge half, draft c times"),
    alpha_shift: bool = typer.Option(True, help="also compare adaptive and fixed γ when α drops halfway"),
    as_json: bool = typer.Option(False, "--json", help="print the points as one JSON object"),
    out: Optional[Path] = typer.Option(None, help="write bench.json, bench.md and PNG plots here"),
):
    """Measure the engines' speedup against the theory (DESIGN §7, §10)."""
    from lookahead_reasoning.eval.bench import Grid, LatencyModel, alpha_shift_check, markdown_table, run_grid, write_report

    if serve_load:
        _bench_serve(url, requests_n, concurrency, max_concurrent, queue_timeout, time_limit, api_key, as_json)
        return
    if not sim:
        raise LookaheadError("give --sim (scheduling grid) or --serve (load check)")
    grid = Grid.quick() if quick else Grid()
    overrides = {}
    if alphas:
        overrides["alphas"] = floats_option(alphas, "alphas")
    if cs:
        overrides["cs"] = floats_option(cs, "cs")
    if widths:
        overrides["widths"] = [int(w) for w in floats_option(widths, "widths")]
    if engines:
        overrides["engines"] = [e.strip() for e in engines.split(",")]
    if depths:
        overrides["depths"] = [d.strip() for d in depths.split(",")]
    grid = validated(Grid, **{**grid.model_dump(), **overrides})
    latency = validated(LatencyModel, problems=problems, target_decode_ms=target_ms, judge_decode_ms=target_ms / 2)
    total = len(grid.alphas) * len(grid.cs) * len(grid.depths) * len(grid.engines) * len(grid.widths)
    from rich.progress import Progress

    with Progress(console=err) as bar:
        task = bar.add_task("bench points", total=total)
        points = run_grid(grid, latency, progress=lambda p: bar.advance(task))
        shift = None
        if alpha_shift:
            bar.update(task, description="α drop halfway: adaptive vs fixed γ")
            shift = alpha_shift_check(latency)
    extra = {"alpha_shift": shift, "latency_model": latency.model_dump(), "judge_cost_j": latency.judge_cost()}
    if out:
        write_report(points, out, extra)
        err.print(f"report written to {out}")
    if as_json:
        print(json.dumps({"points": [p.model_dump(include={
            "alpha", "c", "depth", "width", "engine", "measured_speedup", "theory_speedup", "ratio",
            "overhead_ms_per_round", "prefix_hit_ratio"}) for p in points], **extra}))
    else:
        print(markdown_table(points))
        if shift:
            print(f"α 0.9 → 0.2 halfway (c = 0.1): speedup fixed γ=4 {shift['fixed']:.2f}×, adaptive {shift['adaptive']:.2f}×")


def _bench_serve(url, n, concurrency, max_concurrent, queue_timeout, time_limit, api_key, as_json) -> None:
    from contextlib import nullcontext

    from lookahead_reasoning.eval.loadtest import LocalStack, check_loopback, load

    if n < 1 or concurrency < 1:
        raise LookaheadError("--requests and --concurrency must be >= 1")
    stack = nullcontext(check_loopback(url)) if url else LocalStack(max_concurrent, queue_timeout, "sync")
    with stack as base:
        reports = []
        for model in ("lookahead", "target"):
            err.print(f"loading {base} with {n} requests for model {model}, {concurrency} at a time…")
            reports.append(load(base, model, n, concurrency, 256, api_key, time_limit))
    if as_json:
        print(json.dumps({"url": url or "local simulated stack", "results": reports}))
        return
    for r in reports:
        p50 = "n/a" if r["p50_latency_s"] is None else f"{r['p50_latency_s']:.2f}"
        p99 = "n/a" if r["p99_latency_s"] is None else f"{r['p99_latency_s']:.2f}"
        print(f"{r['model']:>9}: {r['completed']}/{r['requests']} ok, {r['requests_per_s']:.2f} req/s, "
              f"{r['tokens_per_s']:.1f} tok/s, p50 {p50} s, p99 {p99} s, statuses {r['statuses']}")


@app.command()
def serve(
    endpoints: Optional[Path] = typer.Option(None, help="endpoints file written by `lookahead launch`"),
    draft_url: Optional[str] = typer.Option(None, help="draft SGLang server URL"),
    target_url: Optional[str] = typer.Option(None, help="target SGLang server URL"),
    judge_url: Optional[str] = typer.Option(None, help="judge SGLang server URL (default: the target's)"),
    chat_template: Optional[str] = typer.Option(None, help="SGLang chat template name for --*-url servers"),
    host: str = typer.Option("127.0.0.1", help="bind address (beyond loopback an API key is required)"),
    port: int = typer.Option(8000, help="port"),
    engine: str = typer.Option("sync", help="sync or async"),
    depth: str = typer.Option("4", help="γ, or 'adaptive'"),
    width: int = typer.Option(1, help="W: draft candidates per position"),
    verifier: str = typer.Option("llm-judge", help="llm-judge, exact, embedding, embedding-numbers, random, target-score"),
    threshold: Optional[float] = typer.Option(None, help="verifier threshold (default: calibrated, else the verifier's default)"),
    max_concurrent: int = typer.Option(4, help="requests that run at once; the rest wait"),
    queue_timeout: float = typer.Option(30.0, help="seconds a request may wait for a slot before 429"),
    request_timeout: float = typer.Option(600.0, help="seconds a request may run before 504"),
    max_tokens_cap: int = typer.Option(4096, help="largest max_tokens a request may ask for"),
    api_key: Optional[str] = typer.Option(None, envvar="LOOKAHEAD_API_KEY", help="require this bearer token"),
):
    """Serve an OpenAI-compatible API that answers with lookahead reasoning."""
    from lookahead_reasoning.runtime.endpoints import Connection
    from lookahead_reasoning.runtime.launcher import port_in_use
    from lookahead_reasoning.runtime.serve import ServeSettings
    from lookahead_reasoning.runtime.serve import serve as run_server

    config = make_config(**depth_options(depth), width=width, engine=engine, verifier=verifier, judge_threshold=threshold,
                     max_tokens=max_tokens_cap, request_timeout_s=min(request_timeout, 300.0))
    settings = validated(ServeSettings, max_concurrent=max_concurrent, queue_timeout_s=queue_timeout,
                          request_timeout_s=request_timeout, max_tokens_cap=max_tokens_cap, api_key=api_key)
    if port_in_use(port, host):
        raise LookaheadError(f"port {port} is already in use")
    connection = Connection(endpoints_from(endpoints, draft_url, target_url, judge_url, chat_template), config)
    err.print(f"serving lookahead reasoning on http://{host}:{port}/v1 (models: lookahead, target)")
    run_server(connection, config, settings, host, port)


@app.command()
def simserver(
    role: str = typer.Option(..., help="draft, target or judge"),
    port: int = typer.Option(..., help="port on 127.0.0.1"),
    decode_ms: float = typer.Option(10.0, help="per-token decode time at batch size 1"),
    batch_slope: float = typer.Option(0.0, help="relative extra decode time per extra concurrent request"),
    prefill_ms: float = typer.Option(0.0, help="per uncached prompt token"),
    step_tokens: int = typer.Option(10, help="tokens per reasoning step"),
    steps: int = typer.Option(12, help="steps until EOS"),
    alpha: float = typer.Option(0.6, help="judge acceptance probability"),
    seed: int = typer.Option(0, help="seed of the judge's decisions"),
):
    """Serve a simulated SGLang server (see eval/simserver.py) in the foreground."""
    from lookahead_reasoning.eval.simserver import SimConfig, serve
    from lookahead_reasoning.runtime.launcher import port_in_use

    config = validated(SimConfig, role=role, decode_ms=decode_ms, batch_slope=batch_slope, prefill_ms=prefill_ms,
                        step_tokens=step_tokens, steps=steps, alpha=alpha, seed=seed)
    if port_in_use(port):
        raise LookaheadError(f"port {port} is already in use")
    serve(config, port)


def _interrupted() -> None:
    """Ctrl-C: every `finally` has run and finished results are on disk, so leave now.

    A plain exit would wait for SGLang's frontend threads to finish their HTTP requests in
    flight, which on a CPU can take minutes.
    """
    err.print("interrupted")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


def main() -> None:
    warnings.filterwarnings("ignore", message="Error in stream_executor")
    try:
        code = app(standalone_mode=False)  # typer turns Ctrl-C into a returned 130 here, not an exception
        if code == 130:
            _interrupted()
        if isinstance(code, int) and code:
            sys.exit(code)
    except LookaheadError as error:
        err.print(f"[red]error:[/] {error}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except (typer.Abort, KeyboardInterrupt):
        _interrupted()
    except click.ClickException as error:  # usage errors carry their own exit code
        error.show()
        sys.exit(error.exit_code)
    except Exception as error:
        if os.environ.get("LOOKAHEAD_DEBUG"):
            raise
        err.print(
            f"[red]error:[/] unexpected {type(error).__name__}: {first_line(error)} (LOOKAHEAD_DEBUG=1 shows the traceback)",
            highlight=False, soft_wrap=True,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
