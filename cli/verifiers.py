"""`lookahead verifiers evaluate|calibrate|study|collect`: verifiers on labelled step pairs, and collecting them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from lookahead_reasoning.cli.options import (
    DEFAULT_VERIFIER, ChatTemplate, DraftUrl, EmbeddingModel, EndpointsFile, JudgeUrl, MaxStepTokens, MaxTokens,
    TargetUrl, Threshold, Timeout, VERIFIERS, Verifier, endpoints_from, err, make_config,
)
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.servers.endpoints import Endpoints
from lookahead_reasoning.cli.evaluation import progress_bar
from lookahead_reasoning.errors import LookaheadError

verifiers_app = typer.Typer(help="Verifier studies on labelled step pairs.", no_args_is_help=True)


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
    from lookahead_reasoning.verifiers.registry import VERIFIER_NAMES, make_verifier, unknown_verifier, verifier_model

    if name not in VERIFIER_NAMES:
        raise LookaheadError(unknown_verifier(name))
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
    from lookahead_reasoning.verifiers.registry import DEFAULT_THRESHOLDS, VERIFIER_NAMES, unknown_verifier

    names = list(dict.fromkeys(v.strip() for v in verifiers.split(",") if v.strip()))
    unknown = [n for n in names if n not in VERIFIER_NAMES]
    if not names:
        raise LookaheadError("--verifiers names no verifier")
    if unknown:
        raise LookaheadError(unknown_verifier(unknown[0]))
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
