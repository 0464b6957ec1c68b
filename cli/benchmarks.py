"""`lookahead bench sim|load|serve|soak|replay` and `lookahead simserver`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from lookahead_reasoning.cli.options import ApiKey, AsJson, err, number_list
from lookahead_reasoning.errors import LookaheadError, validated


bench_app = typer.Typer(
    help="Measure the engines on simulated servers with GPU-like timing, load or soak `lookahead serve`, or replay "
    "recorded AR answers' step lengths through each round rule.", no_args_is_help=True,
)

Quick = Annotated[bool, typer.Option("--quick", help="a small subset of the grid (a few minutes)")]
Engines = Annotated[Optional[str], typer.Option("--engines", help="sync,async")]


@bench_app.command("sim")
def bench_sim(
    quick: Quick = False,
    alphas: Optional[str] = typer.Option(None, help="α values, e.g. 0.4,0.6,0.8"),
    cs: Optional[str] = typer.Option(None, help="c values, e.g. 0.05,0.1,0.25"),
    depths: Optional[str] = typer.Option(None, help="γ values and/or 'adaptive', e.g. 1,2,4,adaptive"),
    widths: Optional[str] = typer.Option(None, help="W values, e.g. 1,2,4"),
    engines: Engines = None,
    problems: int = typer.Option(2, help="simulated problems per point"),
    target_ms: float = typer.Option(
        20.0, help="simulated target decode time per token in ms; judge half, draft c times"),
    alpha_shift: bool = typer.Option(True, help="also compare adaptive and fixed γ when α drops halfway"),
    as_json: AsJson = False,
    out: Optional[Path] = typer.Option(None, help="write bench.json, bench.md and PNG plots here"),
):
    """The scheduling grid on simulated servers with GPU-like timing, measured against the theory."""
    from lookahead_reasoning.eval.bench import Grid, alpha_shift_check, run_grid
    from lookahead_reasoning.eval.bench_report import bench_table, write_report
    from lookahead_reasoning.eval.simcluster import LatencyModel

    grid = Grid.quick() if quick else Grid()
    overrides = {}
    if alphas:
        overrides["alphas"] = number_list(alphas, "alphas")
    if cs:
        overrides["cs"] = number_list(cs, "cs")
    if widths:
        overrides["widths"] = number_list(widths, "widths", int)
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
        points = run_grid(grid, latency, progress=_point_writer(bar, task, out and out / "bench.jsonl"))
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
            "finite_theory_speedup", "finite_ratio", "pattern_theory_speedup", "pattern_ratio", "overhead_ms_per_round",
            "prefix_hit_ratio"}) for p in points],
            **extra}))
    else:
        print(bench_table(points))
        if shift:
            print(f"α 0.9 → 0.2 halfway (c = 0.1): speedup fixed γ=4 {shift['fixed']:.2f}×, adaptive {shift['adaptive']:.2f}×")


@bench_app.command("load")
def bench_load(
    quick: Quick = False,
    slopes: Optional[str] = typer.Option(None, help="batch slopes, e.g. 0,0.1,1 (0: batches free, 1: linear)"),
    concurrencies: Optional[str] = typer.Option(None, help="concurrent requests, e.g. 1,4,16,64"),
    repeats: Optional[int] = typer.Option(None, help="runs of every point, side by side; medians reported"),
    requests: Optional[int] = typer.Option(
        None, help="requests per point, or three per concurrent request if more (default 32, --quick 16)"),
    depths: Optional[str] = typer.Option(None, help="γ values, 'adaptive' and/or 'ar', e.g. ar,1,2,4,adaptive"),
    engines: Engines = None,
    target_ms: float = typer.Option(
        5.0, help="simulated target decode time per token in ms; judge half, draft c times"),
    as_json: AsJson = False,
    out: Optional[Path] = typer.Option(None, help="write load.json, load.md and load.png here"),
):
    """Speedup against AR as load rises (batch slope × concurrency), on simulated servers with GPU-like timing."""
    from lookahead_reasoning.eval.load_bench import LoadGrid, load_table, run_load_grid, write_load_report
    from lookahead_reasoning.eval.simcluster import LatencyModel

    grid = LoadGrid.quick() if quick else LoadGrid()
    overrides: dict = {}
    if slopes:
        overrides["slopes"] = number_list(slopes, "slopes")
    if concurrencies:
        overrides["concurrency"] = number_list(concurrencies, "concurrencies", int)
    if depths:
        overrides["depths"] = [_load_depth(d.strip()) for d in depths.split(",") if d.strip()]
    if engines:
        overrides["engines"] = [e.strip() for e in engines.split(",") if e.strip()]
    if repeats is not None:
        overrides["repeats"] = repeats
    if requests is not None:
        overrides["min_requests"] = requests
    grid = validated(LoadGrid, **{**grid.model_dump(), **overrides})
    latency = validated(LatencyModel, target_decode_ms=target_ms, judge_decode_ms=target_ms / 2, steps=10,
                        question_words=40)
    from rich.progress import Progress

    total = len(grid.slopes) * len(grid.concurrency) * (1 + (len(grid.depths) - 1) * len(grid.engines))
    with Progress(console=err) as bar:
        task = bar.add_task("load points", total=total)
        points = run_load_grid(grid, latency, progress=_point_writer(bar, task, out and out / "load.jsonl"))
    if out:
        write_load_report(points, out)
        err.print(f"report written to {out} (load.json, load.md, load.png)")
    if as_json:
        print(json.dumps({"points": [p.model_dump(include={
            "slope", "concurrency", "engine", "depth", "width", "tokens_per_s", "p50_s", "p99_s", "speedup_vs_ar",
            "throughput_vs_ar"})
            for p in points]}))
    else:
        print(load_table(points))


@bench_app.command("serve")
def bench_serve(
    url: Optional[str] = typer.Option(None, help="a running frontend on loopback (default: start one on simulated servers)"),
    requests: int = typer.Option(16, help="requests per model"),
    concurrency: int = typer.Option(8, help="requests in flight at once"),
    max_concurrent: int = typer.Option(4, help="without --url: the frontend's concurrency limit"),
    queue_timeout: float = typer.Option(30.0, help="without --url: the frontend's queue timeout"),
    time_limit: float = typer.Option(300.0, help="stop sending after this many seconds per model"),
    api_key: ApiKey = None,
    as_json: AsJson = False,
):
    """A load check of `lookahead serve`, LR and AR."""
    from contextlib import nullcontext

    from lookahead_reasoning.eval.loadtest import LocalStack, check_loopback, load

    if requests < 1 or concurrency < 1:
        raise LookaheadError("--requests and --concurrency must be >= 1")
    stack = nullcontext(check_loopback(url)) if url else LocalStack(max_concurrent, queue_timeout, "sync")
    with stack as base:
        reports = []
        for model in ("lookahead", "target"):
            err.print(f"loading {base} with {requests} requests for model {model}, {concurrency} at a time…")
            reports.append(load(base, model, requests, concurrency, 256, api_key, time_limit))
    if as_json:
        print(json.dumps({"url": url or "local simulated stack", "results": reports}))
        return
    for r in reports:
        p50 = "n/a" if r["p50_latency_s"] is None else f"{r['p50_latency_s']:.2f}"
        p99 = "n/a" if r["p99_latency_s"] is None else f"{r['p99_latency_s']:.2f}"
        print(f"{r['model']:>9}: {r['completed']}/{r['requests']} ok, {r['requests_per_s']:.2f} req/s, "
              f"{r['tokens_per_s']:.1f} tok/s, p50 {p50} s, p99 {p99} s, statuses {r['statuses']}")


@bench_app.command("soak")
def bench_soak(
    duration: float = typer.Option(600.0, help="seconds of load"),
    clients: int = typer.Option(64, help="concurrent clients"),
    fault_every: float = typer.Option(60.0, help="seconds between faults (kill or stall the draft, judge or "
                                      "target server, in turn)"),
    as_json: AsJson = False,
    out: Optional[Path] = typer.Option(None, help="write soak.json and the processes' logs here"),
):
    """A soak of `lookahead serve` on simulated servers: mixed and hostile clients, the servers killed or stalled."""
    from rich.console import Console

    from lookahead_reasoning.eval.soak import SoakSettings, run_soak
    from lookahead_reasoning.eval.soak_report import soak_summary, soak_tables

    settings = validated(SoakSettings, duration_s=duration, clients=clients, fault_every_s=fault_every)
    report = run_soak(settings, out, say=lambda line: err.print(line, highlight=False))
    if out:
        (out / "soak.json").write_text(json.dumps(report, indent=2))
        err.print(f"report written to {out / 'soak.json'}; logs in {out}")
    if as_json:
        print(json.dumps(report))
    else:
        console = Console()
        if not console.is_terminal:  # a file or a pipe: wide enough for every column, not rich's 80
            console = Console(width=160)
        for table in soak_tables(report):
            console.print(table)
        for line in soak_summary(report):
            console.print(line, highlight=False, markup=False)
    if not report["passed"]:
        raise typer.Exit(1)


@bench_app.command("replay")
def bench_replay(
    results: Path = typer.Argument(..., help="an eval results.jsonl, whose AR answers' real step lengths are replayed"),
    probe: Optional[Path] = typer.Option(None, help="the servers' costs, required (lookahead servers probe --json)"),
    alphas: str = typer.Option("0.63,0.8,1", help="α values"),
    depths: str = typer.Option("1,2,3", help="γ values"),
    as_json: AsJson = False,
):
    """The ceiling of each round rule and γ on recorded AR answers' real step lengths, priced with --probe."""
    from lookahead_reasoning.eval.replay import RULE_TITLES, RULES, ceilings, load_answers, load_costs

    if probe is None:
        raise LookaheadError("bench replay needs --probe PROBE.json (write it with lookahead servers probe --json)")
    answers = load_answers(results)
    costs = load_costs(probe)
    alpha_list = number_list(alphas, "alphas")
    depth_list = number_list(depths, "depths", int)
    found = ceilings(answers, costs, depths=depth_list, alphas=alpha_list)
    if as_json:
        print(json.dumps({"answers": len(answers), "steps": sum(map(len, answers)),
                          "ceilings": [vars(c) for c in found]}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"AR time over LR time, {len(answers)} recorded AR answers ({sum(map(len, answers))} steps), "
                        f"drafts accepted with probability α")
    table.add_column("round rule")
    table.add_column("γ", justify="right")
    for alpha in alpha_list:
        table.add_column(f"α {alpha:g}", justify="right")
    for rule in RULES:
        for depth in depth_list:
            row = [c.speedup for c in found if c.rule == rule and c.depth == depth]
            table.add_row(RULE_TITLES[rule] if depth == depth_list[0] else "", str(depth), *(f"{v:.2f}" for v in row))
    Console().print(table)


def _point_writer(bar, task, path: Optional[Path]):
    """Each finished point: shown above the progress bar and, with --out, appended to `path` at once, so
    that a long grid that stops keeps what it measured."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def write(point) -> None:
        bar.advance(task)
        line = point.model_dump_json()
        bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
        if path is not None:
            with path.open("a") as f:
                f.write(line + "\n")

    return write


def _load_depth(text: str):
    if text in ("ar", "adaptive"):
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise LookaheadError(f"--depths takes 'ar', 'adaptive' or whole numbers >= 1, got {text!r}")


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
    """Serve a simulated SGLang server (eval/simserver.py) in the foreground."""
    from lookahead_reasoning.eval.simserver import SimConfig, serve
    from lookahead_reasoning.runtime.servers.processes import port_in_use

    config = validated(SimConfig, role=role, decode_ms=decode_ms, batch_slope=batch_slope, prefill_ms=prefill_ms,
                        step_tokens=step_tokens, steps=steps, alpha=alpha, seed=seed)
    if port_in_use(port):
        raise LookaheadError(f"port {port} is already in use")
    serve(config, port)
