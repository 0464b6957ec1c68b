"""Evaluation commands: `lookahead eval`, `report` and `sweep` (benchmarks: cli/benchmarks.py; verifier studies: cli/verifiers.py)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from lookahead_reasoning.cli.options import (
    DEFAULT_VERIFIER, ChatTemplate, Depth, DraftUrl, EndpointsFile, Fork, JudgeUrl, MaxStepTokens, MaxTokens, TargetUrl,
    Temperature, Threshold, Timeout, Verifier, Width, depth_options, endpoints_from, err, make_config, number_list,
)
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.servers.endpoints import Endpoints
from lookahead_reasoning.errors import LookaheadError

ForceReuse = Annotated[bool, typer.Option(
    "--force-reuse", help="go on from results in --out although eval.json is missing or names other models (or none); "
                          "it then names this run's models")]


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("ETA"), TimeRemainingColumn(), console=err,
    )


@contextmanager
def servers(sim: bool, sim_alpha: float, sim_c: float, sim_target_ms: float, endpoints, draft_url, target_url,
            judge_url, chat_template) -> Iterator[Endpoints]:
    """Real servers from an endpoints file or URLs, or three simulated ones started here."""
    if not sim:
        yield endpoints_from(endpoints, draft_url, target_url, judge_url, chat_template)
        return
    from lookahead_reasoning.eval.simcluster import LatencyModel, SimCluster

    with SimCluster(LatencyModel(target_decode_ms=sim_target_ms, judge_decode_ms=sim_target_ms / 2)) as cluster:
        cluster.configure(sim_alpha, sim_c)
        yield cluster.endpoints()


def describe_verifier(server_set: Endpoints, config: LookaheadConfig) -> str:
    """The verifier and the threshold a run will use, and where the threshold came from."""
    from lookahead_reasoning.runtime.servers.connection import Connection
    from lookahead_reasoning.verifiers.registry import threshold_and_source, verifier_model

    model = None
    if config.verifier_threshold is None:  # only then does the judging model matter
        backends = Connection(server_set, config.model_copy(update={"verifier": "exact"})).backends
        model = verifier_model(config.verifier, backends["judge"], backends["target"], config.embedding_model)
    value, source = threshold_and_source(config.verifier, config.verifier_threshold, model)
    return f"verifier {config.verifier}, threshold {value:.3f} ({source})"


def run_with_progress(problems, methods, endpoints, out, settings, samples, label: str, grade_answers: bool = True,
                      unsafe_no_sandbox: bool = False, force_reuse: bool = False, **selection):
    from lookahead_reasoning.eval.records import adopt_results
    from lookahead_reasoning.eval.runner import run_eval

    if force_reuse:
        adopt_results(out, settings)

    with progress_bar() as bar:
        task = bar.add_task(label, total=None)

        def advance(record, amount, total):
            if record is None:
                bar.update(task, total=total, completed=amount)
                return
            mark = {True: "right", False: "wrong", None: "ungraded"}[record.correct]
            bar.update(task, advance=amount, description=f"{label} · {record.problem_id} {record.method}: {mark}")
            if not err.is_terminal:  # a log file gets one line per result instead of a live bar
                done = int(bar.tasks[0].completed)
                err.print(f"{done}/{total} {record.problem_id} {record.method}: {mark}, {record.wall_s:.1f} s, "
                          f"{record.output_tokens} tokens", highlight=False)

        return run_eval(problems, methods, endpoints, out, settings, samples, progress=advance,
                        grade_answers=grade_answers, unsafe_no_sandbox=unsafe_no_sandbox, **selection)


def eval_command(
    dataset: str = typer.Option(..., help="gsm8k, math500, aime24, amc23, gpqa_diamond, humaneval, livecodebench, mt_bench"),
    data: Optional[Path] = typer.Option(None, help="local JSON Lines file (default: the Hugging Face hub)"),
    methods: str = typer.Option("ar,lr", help="comma-separated: ar, lr, lr-async, lr-random, draft"),
    problems: Optional[str] = typer.Option(None, "--problems", help="FIRST-LAST: the problems at these 0-based indices"),
    limit: Optional[int] = typer.Option(None, help="the first N problems (with --ar-finishes: the first N kept)"),
    ar_finishes: bool = typer.Option(
        False, "--ar-finishes", help="keep only problems whose AR answer ends before --max-tokens (ar must come first)"),
    concurrency: int = typer.Option(1, help="problems run at once (times are then measured under that load)"),
    samples: int = typer.Option(1, help="runs per problem and method (seeds differ when sampling)"),
    verifier: Verifier = DEFAULT_VERIFIER,
    threshold: Threshold = None,
    out: Path = typer.Option(..., help="folder for results.jsonl and the report"),
    endpoints: EndpointsFile = None,
    draft_url: DraftUrl = None,
    target_url: TargetUrl = None,
    judge_url: JudgeUrl = None,
    chat_template: ChatTemplate = None,
    depth: Depth = "4",
    width: Width = 1,
    fork: Fork = "streamed",
    max_tokens: MaxTokens = 1024,
    max_step_tokens: MaxStepTokens = 100,
    temperature: Temperature = 0.0,
    seed: Optional[int] = typer.Option(None, help="sampling seed (sample k uses seed + k)"),
    timeout: Timeout = 300.0,
    unsafe_no_sandbox: bool = typer.Option(
        False, "--unsafe-no-sandbox",
        help="grade code answers without bubblewrap isolation (an audit hook and rlimits only): only where bwrap cannot run"),
    force_reuse: ForceReuse = False,
):
    """Evaluate methods on a benchmark: accuracy, acceptance, speedup against AR, tokens/s."""
    from lookahead_reasoning.eval.datasets import dataset_spec, load_problems, problem_span
    from lookahead_reasoning.eval.report import markdown_report, write_report
    from lookahead_reasoning.eval.runner import parse_methods
    from lookahead_reasoning.eval.served import served_models

    spec = dataset_spec(dataset)
    if limit is not None and limit < 1:
        raise LookaheadError("--limit must be >= 1")
    sampling = {"temperature": temperature}
    config = make_config(
        **depth_options(depth), width=width, fork=fork, max_tokens=max_tokens, max_step_tokens=max_step_tokens,
        verifier=verifier, verifier_threshold=threshold, draft_sampling=sampling, target_sampling=sampling,
        seed=seed, request_timeout_s=timeout,
    )
    method_specs = parse_methods(methods, config)
    span = problem_span(problems) if problems else None
    chosen = load_problems(dataset, data, None if ar_finishes else limit, span)
    server_set = endpoints_from(endpoints, draft_url, target_url, judge_url, chat_template)
    settings = {"dataset": dataset, "data": str(data) if data else spec.hf_id,
                "config": config.model_dump(exclude=config.fields_without_effect())}
    settings["models"] = served_models(server_set)  # a resume against other models is refused
    settings.update(concurrency=concurrency, ar_finishes=ar_finishes)
    verifier_note = describe_verifier(server_set, config)
    if unsafe_no_sandbox:
        err.print("warning: --unsafe-no-sandbox: model-written code runs without isolation, "
                  "behind an audit hook and rlimits only", highlight=False)
    elif any(p.grader == "code" for p in chosen):
        from lookahead_reasoning.eval.sandbox import limits_warning

        warning = limits_warning()  # where graded code could start processes: one line, before anything runs
        if warning:
            err.print(f"warning: {warning}", highlight=False, soft_wrap=True)
    records = run_with_progress(chosen, method_specs, server_set, out, settings, samples, dataset,
                                unsafe_no_sandbox=unsafe_no_sandbox, force_reuse=force_reuse, concurrency=concurrency,
                                ar_finishes=ar_finishes, keep=limit if ar_finishes else None)
    kept = len({r.problem_id for r in records})
    title = f"{dataset}: {kept} problems × {samples} sample(s)"
    notes = [f"γ = {depth}, W = {width}, {verifier_note}, max_tokens {max_tokens}"] + ([spec.note] if spec.note else [])
    if ar_finishes:
        notes.append(f"only problems whose AR answer ends before {max_tokens} tokens")
    if concurrency > 1:
        notes.append(f"{concurrency} problems at once: times are under that load")
    summaries = write_report(records, [m.name for m in method_specs], out, title, notes)
    print(markdown_report(summaries, title, notes))
    err.print(f"results in {out / 'results.jsonl'}; report in {out / 'report.md'}, report.json, report.png")


def report_command(
    folders: list[Path] = typer.Argument(..., help="results folders written by `lookahead eval --out` (complete or "
                                                   "not); several are pooled into one report"),
    baseline: str = typer.Option("ar", help="the method the accuracy differences and speedups are against "
                                            "(e.g. lr-random: what the verifier keeps)"),
    out: Optional[Path] = typer.Option(None, help="where a report over several folders goes"),
):
    """Print the report of a results folder and rewrite its report files (report.md, .json, .png; against
    another baseline B: report-vs-B.md, .json, .png). Several folders (one dataset and the same models, no
    problem in two) are pooled into one report in --out; its notes name the settings they differ in."""
    from lookahead_reasoning.eval.report import markdown_report, report_folders, report_stem

    summaries, title, notes = report_folders(folders, baseline, out)
    print(markdown_report(summaries, title, notes))
    stem, written = report_stem(baseline), out or folders[0]
    err.print(f"report in {written / (stem + '.md')}, {stem}.json, {stem}.png")


def sweep_command(
    dataset: str = typer.Option(..., help="a dataset name, as for `lookahead eval`"),
    width: str = typer.Option("1,2,4", help="tree widths W, comma-separated"),
    depth: str = typer.Option("1,2,4,6", help="depths γ, comma-separated"),
    data: Optional[Path] = typer.Option(None, help="local JSON Lines file (default: the Hugging Face hub)"),
    limit: Optional[int] = typer.Option(None, help="the first N problems"),
    out: Path = typer.Option(..., help="folder for results.jsonl, sweep.md and plots"),
    sim: bool = typer.Option(False, "--sim", help="simulated servers with GPU-like timing (accuracy is n/a)"),
    sim_alpha: float = typer.Option(0.6, help="--sim: the simulated judge's acceptance rate"),
    sim_c: float = typer.Option(0.1, help="--sim: draft time per token / target time per token"),
    sim_target_ms: float = typer.Option(20.0, help="--sim: target decode time per token (ms); the judge's is half"),
    engine: str = typer.Option("sync", help="sync or async"),
    verifier: Verifier = DEFAULT_VERIFIER,
    threshold: Threshold = None,
    endpoints: EndpointsFile = None,
    draft_url: DraftUrl = None,
    target_url: TargetUrl = None,
    judge_url: JudgeUrl = None,
    chat_template: ChatTemplate = None,
    max_tokens: MaxTokens = 1024,
    max_step_tokens: MaxStepTokens = 100,
    max_tree_nodes: int = typer.Option(32, help="budget of draft nodes per round for W > 1"),
    seed: int = typer.Option(1, help="sampling seed of the tree's draft candidates"),
    timeout: Timeout = 300.0,
    force_reuse: ForceReuse = False,
):
    """Sweep tree width against depth (the paper's Table 3): accuracy / acceptance / speedup per cell."""
    from lookahead_reasoning.eval.datasets import dataset_spec, load_problems

    spec = dataset_spec(dataset)
    widths, depths = number_list(width, "width", int, minimum=1), number_list(depth, "depth", int, minimum=1)
    if sim and not (0.0 < sim_alpha < 1.0 and sim_c > 0.0 and sim_target_ms > 0.0):
        raise LookaheadError("--sim-alpha must lie in (0, 1), and --sim-c and --sim-target-ms must be > 0")
    from lookahead_reasoning.eval.report import write_report
    from lookahead_reasoning.eval.served import served_models
    from lookahead_reasoning.eval.sweep import plot_sweep, sweep_methods, table3

    config = make_config(
        max_tokens=max_tokens, max_step_tokens=max_step_tokens, engine=engine, verifier=verifier,
        verifier_threshold=threshold, max_tree_nodes=max_tree_nodes, seed=seed, request_timeout_s=timeout,
    )
    methods = sweep_methods(widths, depths, config)
    problems = load_problems(dataset, data, limit)
    settings = {"dataset": dataset, "data": str(data) if data else spec.hf_id,
                "config": config.model_dump(exclude={"request_timeout_s", "width", "depth"}),
                "sim": {"alpha": sim_alpha, "c": sim_c, "target_ms": sim_target_ms} if sim else None}
    with servers(sim, sim_alpha, sim_c, sim_target_ms, endpoints, draft_url, target_url, judge_url, chat_template) as server_set:
        settings["models"] = served_models(server_set)  # a resume against other models is refused
        verifier_note = describe_verifier(server_set, config)
        records = run_with_progress(problems, methods, server_set, out, settings, 1, f"sweep {dataset}",
                                    grade_answers=not sim, force_reuse=force_reuse)
    where = f"simulated servers (α = {sim_alpha}, c = {sim_c})" if sim else "real servers"
    title = f"{dataset}: W × γ sweep, {len(problems)} problems, {engine} engine, {where}"
    notes = [verifier_note] + (["simulated servers write synthetic text: accuracy is n/a"] if sim else
                               ([spec.note] if spec.note else []))
    summaries = write_report(records, [m.name for m in methods], out, title, notes)
    table = table3(summaries, widths, depths)
    (out / "sweep.md").write_text(f"# {title}\n\n" + "".join(f"> {n}\n" for n in notes) + "\n" + table)
    plot_sweep(summaries, widths, depths, out / "sweep.png", title)
    print(table)
    err.print(f"results in {out / 'results.jsonl'}; table in {out / 'sweep.md'}; plots in sweep.png and report.png")
