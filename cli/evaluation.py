"""Evaluation commands: `lookahead eval`, `sweep`, `bench`, `simserver` and `verifiers evaluate|calibrate|study|collect`."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from lookahead_reasoning.cli.options import (
    DEFAULT_VERIFIER, ApiKey, AsJson, ChatTemplate, Depth, DraftUrl, EmbeddingModel, EndpointsFile, JudgeUrl,
    MaxStepTokens, MaxTokens, TargetUrl, Temperature, Threshold, Timeout, VERIFIERS, Verifier, Width, depth_options,
    endpoints_from, err, make_config, number_list,
)
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.servers.endpoints import Endpoints
from lookahead_reasoning.errors import LookaheadError, validated

verifiers_app = typer.Typer(help="Verifier studies on labelled step pairs.", no_args_is_help=True)


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
    from lookahead_reasoning.eval.simserver import LatencyModel, SimCluster

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
                      unsafe_no_sandbox: bool = False, **selection):
    from lookahead_reasoning.eval.runner import run_eval

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
    max_tokens: MaxTokens = 1024,
    max_step_tokens: MaxStepTokens = 100,
    temperature: Temperature = 0.0,
    seed: Optional[int] = typer.Option(None, help="sampling seed (sample k uses seed + k)"),
    timeout: Timeout = 300.0,
    unsafe_no_sandbox: bool = typer.Option(
        False, "--unsafe-no-sandbox",
        help="grade code answers without bubblewrap isolation (an audit hook and rlimits only): only where bwrap cannot run"),
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
        **depth_options(depth), width=width, max_tokens=max_tokens, max_step_tokens=max_step_tokens,
        verifier=verifier, verifier_threshold=threshold, draft_sampling=sampling, target_sampling=sampling,
        seed=seed, request_timeout_s=timeout,
    )
    method_specs = parse_methods(methods, config)
    span = problem_span(problems) if problems else None
    chosen = load_problems(dataset, data, None if ar_finishes else limit, span)
    server_set = endpoints_from(endpoints, draft_url, target_url, judge_url, chat_template)
    settings = {"dataset": dataset, "data": str(data) if data else spec.hf_id,
                "config": config.model_dump(exclude={"request_timeout_s"})}
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
                                unsafe_no_sandbox=unsafe_no_sandbox, concurrency=concurrency,
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
    folder: Path = typer.Argument(..., help="a results folder written by `lookahead eval --out` (complete or not)"),
):
    """Print the report of a results folder and rewrite its report.md, report.json and report.png."""
    from lookahead_reasoning.eval.report import markdown_report, report_folder

    summaries, title, notes = report_folder(folder)
    print(markdown_report(summaries, title, notes))
    err.print(f"report in {folder / 'report.md'}, report.json, report.png")


def _verifier_connection(name: str, endpoints, judge_url, target_url, chat_template, timeout):
    from lookahead_reasoning.runtime.servers.connection import Connection
    from lookahead_reasoning.verifiers.registry import base_verifier

    name = base_verifier(name)
    if name not in ("llm-judge", "target-score"):
        return None
    url = judge_url if name == "llm-judge" else target_url
    if url:
        server_set = Endpoints.from_urls(url, url, url, chat_template)
    else:
        server_set = endpoints_from(endpoints, None, None, None, chat_template)
    return Connection(server_set, LookaheadConfig(verifier="exact", request_timeout_s=timeout))


def _build_verifier(name, threshold, endpoints, judge_url, target_url, chat_template, embedding_model, timeout):
    from lookahead_reasoning.verifiers.registry import VERIFIER_NAMES, make_verifier, verifier_model

    if name not in VERIFIER_NAMES:
        raise LookaheadError(f"unknown verifier {name!r}; known: {', '.join(VERIFIER_NAMES)}")
    connection = _verifier_connection(name, endpoints, judge_url, target_url, chat_template, timeout)
    backends = connection.backends if connection else {}
    try:
        verifier = make_verifier(name, threshold, judge_backend=backends.get("judge"),
                                 target_backend=backends.get("target"), embedding_model=embedding_model)
    except (ValueError, OSError) as error:
        raise LookaheadError(f"verifier {name}: {error}") from None
    model = verifier_model(name, backends.get("judge"), backends.get("target"), embedding_model)
    return verifier, model


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


PairsFile = Annotated[Path, typer.Option(
    "--pairs", help="JSON lines {step_a, step_b, equivalent[, id, context, split]}")]
Split = Annotated[Optional[str], typer.Option("--split", help="only the pairs whose split field is this (dev, test)")]
ScorerEndpoints = Annotated[Optional[Path], typer.Option(
    "--endpoints", help="endpoints file written by `lookahead launch` (llm-judge, target-score)")]
ScorerJudgeUrl = Annotated[Optional[str], typer.Option("--judge-url", help="judge server URL (llm-judge)")]
ScorerTargetUrl = Annotated[Optional[str], typer.Option("--target-url", help="target server URL (target-score)")]
ScorerTemplate = Annotated[Optional[str], typer.Option("--chat-template", help="SGLang chat template name for the URL")]


def _labelled(pairs: Path, split: Optional[str]):
    from lookahead_reasoning.eval.verifier_study import load_pairs, select_split

    return select_split(load_pairs(pairs), split, pairs)


@verifiers_app.command("evaluate")
def verifiers_evaluate(
    pairs: PairsFile,
    verifier: str = typer.Option(..., help=VERIFIERS),
    threshold: Optional[float] = typer.Option(None, help="default: calibrated, else the verifier's default"),
    split: Split = None,
    endpoints: ScorerEndpoints = None,
    judge_url: ScorerJudgeUrl = None,
    target_url: ScorerTargetUrl = None,
    chat_template: ScorerTemplate = None,
    embedding_model: EmbeddingModel = None,
    timeout: Timeout = 300.0,
    as_json: bool = typer.Option(False, "--json", help="print the metrics as JSON, intervals included"),
):
    """Precision, recall and F1 (with 95 % bootstrap intervals) and accuracy of a verifier on labelled pairs."""
    from lookahead_reasoning.eval.verifier_report import metric_cell
    from lookahead_reasoning.eval.verifier_study import evaluate
    from lookahead_reasoning.verifiers.registry import resolve_threshold

    labelled = _labelled(pairs, split)
    built, model = _build_verifier(verifier, threshold, endpoints, judge_url, target_url, chat_template,
                                   embedding_model, timeout)
    result = evaluate(built, labelled, resolve_threshold(verifier, threshold, model))
    if as_json:
        print(result.model_dump_json())
        return
    print(f"{verifier}: precision {metric_cell(result.precision, result.precision_ci)}, "
          f"recall {metric_cell(result.recall, result.recall_ci)}, F1 {metric_cell(result.f1, result.f1_ci)}, "
          f"accuracy {result.accuracy:.3f}, threshold {_fmt(result.threshold)}, n {result.n}")


def _min_precision(value: float) -> float:
    if not 0.0 < value <= 1.0:
        raise LookaheadError("--min-precision must lie in (0, 1]")
    return value


@verifiers_app.command("calibrate")
def verifiers_calibrate(
    pairs: PairsFile,
    verifier: str = typer.Option("llm-judge", help="a verifier with a score: " + VERIFIERS),
    min_precision: float = typer.Option(0.9, help="the precision the threshold must keep"),
    split: Split = None,
    endpoints: ScorerEndpoints = None,
    judge_url: ScorerJudgeUrl = None,
    target_url: ScorerTargetUrl = None,
    chat_template: ScorerTemplate = None,
    embedding_model: EmbeddingModel = None,
    timeout: Timeout = 300.0,
    as_json: bool = typer.Option(False, "--json", help="print the calibration as JSON"),
):
    """Pick the threshold with the best accuracy at precision >= --min-precision, and save it for run and eval."""
    from lookahead_reasoning.eval.verifier_study import calibrate, judge_all
    from lookahead_reasoning.verifiers.calibration import save_calibration
    from lookahead_reasoning.verifiers.registry import VERIFIER_NAMES, has_score

    if verifier in VERIFIER_NAMES and not has_score(verifier):
        raise LookaheadError(f"verifier {verifier} has no score to calibrate")
    _min_precision(min_precision)
    labelled = _labelled(pairs, split)
    built, model = _build_verifier(verifier, 0.5, endpoints, judge_url, target_url, chat_template,
                                   embedding_model, timeout)
    source = str(pairs) if split is None else f"{pairs} [{split}]"
    calibration = calibrate(labelled, judge_all(built, labelled), source, min_precision)
    path = save_calibration(verifier, model, calibration)
    if as_json:
        print(json.dumps({"verifier": verifier, "model": model, **calibration.model_dump()}))
    else:
        met = "" if calibration.met_precision else f" (no threshold reached precision {min_precision}; kept the most precise)"
        print(f"{verifier} on {model}: threshold {calibration.threshold:.3f}, precision {_fmt(calibration.precision)}, "
              f"recall {_fmt(calibration.recall)}, accuracy {calibration.accuracy:.3f}, n {calibration.n}{met}")
    err.print(f"saved to {path}; run, eval and serve use it when no --threshold is given")


@verifiers_app.command("study")
def verifiers_study(
    pairs: PairsFile,
    verifiers: str = typer.Option("llm-judge,embedding,embedding-numbers,exact",
                                  help="comma-separated verifier names: " + VERIFIERS),
    out: Path = typer.Option(..., help="folder for study.md, study.json, pr.png and the score cache scores.jsonl"),
    dev_split: str = typer.Option("dev", help="the split thresholds are chosen on"),
    test_split: str = typer.Option("test", help="the split the metrics are measured on"),
    min_precision: float = typer.Option(0.92, help="the precision the threshold chosen on dev must keep there"),
    endpoints: ScorerEndpoints = None,
    judge_url: ScorerJudgeUrl = None,
    target_url: ScorerTargetUrl = None,
    chat_template: ScorerTemplate = None,
    embedding_model: EmbeddingModel = None,
    timeout: Timeout = 300.0,
):
    """Per verifier: a threshold chosen on the dev split, then precision, recall and F1 with 95 % bootstrap
    intervals on the test split, at that threshold and at the default. Scores are cached in OUT/scores.jsonl:
    a rerun asks no server about a pair it already scored."""
    from lookahead_reasoning.eval.verifier_report import markdown, write_study
    from lookahead_reasoning.eval.verifier_study import load_pairs
    from lookahead_reasoning.verifiers.registry import DEFAULT_THRESHOLDS, VERIFIER_NAMES

    names = list(dict.fromkeys(v.strip() for v in verifiers.split(",") if v.strip()))
    unknown = [n for n in names if n not in VERIFIER_NAMES]
    if not names:
        raise LookaheadError("--verifiers names no verifier")
    if unknown:
        raise LookaheadError(f"unknown verifier {unknown[0]!r}; known: {', '.join(VERIFIER_NAMES)}")
    if dev_split == test_split:
        raise LookaheadError("--dev-split and --test-split must differ: "
                             "a threshold is judged on pairs it was not chosen on")
    _min_precision(min_precision)

    def build(name: str):  # only for pairs the cache lacks; at the default, so no saved calibration plays a part
        return _build_verifier(name, DEFAULT_THRESHOLDS[name], endpoints, judge_url, target_url, chat_template,
                               embedding_model, timeout)[0]

    study = write_study(load_pairs(pairs), pairs, names, build, out, dev_split, test_split, min_precision)
    print(markdown(study))
    err.print(f"study in {out / 'study.md'}, study.json, pr.png; scores cached in {out / 'scores.jsonl'}")


@verifiers_app.command("collect")
def verifiers_collect(
    dataset: str = typer.Option(..., help="a dataset name, as for `lookahead eval`"),
    out: Path = typer.Option(..., help="JSON lines file the pairs are appended to (resumes where it stopped)"),
    data: Optional[Path] = typer.Option(None, help="local JSON Lines file (default: the Hugging Face hub)"),
    skip: int = typer.Option(0, min=0, help="leave out the first N problems"),
    limit: Optional[int] = typer.Option(None, min=1, help="then take N problems"),
    endpoints: EndpointsFile = None,
    draft_url: DraftUrl = None,
    target_url: TargetUrl = None,
    judge_url: JudgeUrl = None,
    chat_template: ChatTemplate = None,
    depth: int = typer.Option(3, min=1, help="γ: draft steps per round (each round gives γ pairs)"),
    max_tokens: MaxTokens = 512,
    max_step_tokens: MaxStepTokens = 100,
    verifier: Verifier = DEFAULT_VERIFIER,
    threshold: Threshold = None,
    timeout: Timeout = 300.0,
):
    """Run lookahead rounds on a benchmark and write every judged (target step, draft step) pair with its context:
    the raw material of a labelled set (label by the guide in docs/evaluation.md)."""
    from lookahead_reasoning.eval.datasets import load_problems
    from lookahead_reasoning.eval.step_pairs import collect, done_problems
    from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

    config = make_config(depth=depth, max_tokens=max_tokens, max_step_tokens=max_step_tokens, verifier=verifier,
                         verifier_threshold=threshold, request_timeout_s=timeout, fork="batched")
    problems = load_problems(dataset, data, None if limit is None else skip + limit)[skip:]
    reasoner = LookaheadReasoner(endpoints_from(endpoints, draft_url, target_url, judge_url, chat_template), config)
    source = f"{dataset}:{data.name if data else 'hub'}"
    with progress_bar() as progress:
        done = done_problems(out)
        task = progress.add_task("collecting pairs", total=sum(p.id not in done for p in problems))
        written = collect(problems, lambda message, on_round: reasoner.run(message, on_round=on_round), out, source,
                          on_problem=lambda problem, n: progress.advance(task))
    err.print(f"{written} pairs appended to {out}")


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
                                    grade_answers=not sim)
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


def bench(
    sim: bool = typer.Option(False, "--sim", help="the scheduling grid on simulated servers with GPU-like timing"),
    load: bool = typer.Option(False, "--load", help="speedup against AR as load rises (batch slope × concurrency)"),
    slopes: Optional[str] = typer.Option(None, help="--load: batch slopes, e.g. 0,0.1,1 (0: batches free, 1: linear)"),
    concurrencies: Optional[str] = typer.Option(None, help="--load: concurrent requests, e.g. 1,4,16,64"),
    repeats: Optional[int] = typer.Option(None, help="--load: runs of every point, side by side; medians reported"),
    serve_load: bool = typer.Option(False, "--serve", help="a load check of `lookahead serve`, LR and AR"),
    soak: bool = typer.Option(False, "--soak", help="a soak of `lookahead serve` over simulated servers: mixed and "
                              "hostile clients while the servers are killed or stalled in turn"),
    duration: float = typer.Option(600.0, help="--soak: seconds of load"),
    clients: int = typer.Option(64, help="--soak: concurrent clients"),
    fault_every: float = typer.Option(60.0, help="--soak: seconds between faults (kill or stall the draft, judge or "
                                      "target server, in turn)"),
    url: Optional[str] = typer.Option(None, help="--serve: a running frontend on loopback (default: start one on simulated servers)"),
    requests: Optional[int] = typer.Option(
        None, help="--serve: requests per model (default 16); --load: requests per point, or three per concurrent request if more (default 32, --quick 16)"),
    concurrency: int = typer.Option(8, help="--serve: requests in flight at once"),
    max_concurrent: int = typer.Option(4, help="--serve without --url: the frontend's concurrency limit"),
    queue_timeout: float = typer.Option(30.0, help="--serve without --url: the frontend's queue timeout"),
    time_limit: float = typer.Option(300.0, help="--serve: stop sending after this many seconds per model"),
    api_key: ApiKey = None,
    quick: bool = typer.Option(False, "--quick", help="a small subset of the grid (a few minutes)"),
    alphas: Optional[str] = typer.Option(None, help="α values, e.g. 0.4,0.6,0.8"),
    cs: Optional[str] = typer.Option(None, help="c values, e.g. 0.05,0.1,0.25"),
    depths: Optional[str] = typer.Option(None, help="γ values and/or 'adaptive' (and 'ar' with --load), e.g. 1,2,4,adaptive"),
    widths: Optional[str] = typer.Option(None, help="W values, e.g. 1,2,4"),
    engines: Optional[str] = typer.Option(None, help="sync,async"),
    problems: int = typer.Option(2, help="simulated problems per point"),
    target_ms: Optional[float] = typer.Option(
        None, help="simulated target decode time per token in ms (default 20; 5 with --load); judge half, draft c times"),
    alpha_shift: bool = typer.Option(True, help="also compare adaptive and fixed γ when α drops halfway"),
    as_json: AsJson = False,
    out: Optional[Path] = typer.Option(None, help="write bench.json, bench.md and PNG plots here (--soak: soak.json "
                                       "and the processes' logs)"),
):
    """Measure the engines on simulated servers with GPU-like timing: against the theory (--sim), under load
    (--load), or a running frontend (--serve); or soak `lookahead serve` with faults (--soak)."""
    if soak:
        _bench_soak(duration, clients, fault_every, as_json, out)
        return
    if serve_load:
        _bench_serve(url, 16 if requests is None else requests, concurrency, max_concurrent, queue_timeout, time_limit,
                     api_key, as_json)
        return
    if load:
        _bench_load(quick, slopes, concurrencies, repeats, requests, depths, engines, target_ms or 5.0, as_json, out)
        return
    if not sim:
        raise LookaheadError("give --sim (scheduling grid), --load (speedup under load) or --serve (load check)")
    from lookahead_reasoning.eval.bench import Grid, alpha_shift_check, run_grid
    from lookahead_reasoning.eval.bench_report import bench_table, write_report
    from lookahead_reasoning.eval.simserver import LatencyModel

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
    target_ms = target_ms or 20.0
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


def _bench_load(quick, slopes, concurrencies, repeats, requests, depths, engines, target_ms, as_json, out) -> None:
    from lookahead_reasoning.eval.load_bench import LoadGrid, load_table, run_load_grid, write_load_report
    from lookahead_reasoning.eval.simserver import LatencyModel

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


def _bench_soak(duration: float, clients: int, fault_every: float, as_json: bool, out: Optional[Path]) -> None:
    from rich.console import Console

    from lookahead_reasoning.eval.soak import SoakSettings, run_soak, soak_summary, soak_tables

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
