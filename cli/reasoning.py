"""Reasoning commands: `lookahead run` and `lookahead demo`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer

from lookahead_reasoning.cli.options import (
    DEFAULT_VERIFIER, AsJson, ChatTemplate, Depth, Device, DraftUrl, EndpointsFile, Engine, Fork, JudgeUrl, MaxStepTokens,
    MaxTokens, TargetUrl, Temperature, Threshold, Timeout, Verifier, Width, depth_options, endpoints_from, err,
    make_config,
)
from lookahead_reasoning.errors import LookaheadError

DEMO_QUESTION = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)
# answered first, unmeasured, so that the adaptive policy has learned the servers' costs (its probes and its
# measuring round) and α before the demo question, which then runs the plan the demo prints beside it. It is a
# question of the demo question's kind (a quantity, a multiple of it, their sum): α depends on the question,
# and one answer's α̂ carries over only to answers like it.
WARM_UP_QUESTION = (
    "Tom read 24 pages of a book on Monday, and then he read three times as many pages on Tuesday. "
    "How many pages did Tom read on Monday and Tuesday together?"
)


def run(
    question: str = typer.Argument(..., help="the question to answer"),
    endpoints: EndpointsFile = None,
    draft_url: DraftUrl = None,
    target_url: TargetUrl = None,
    judge_url: JudgeUrl = None,
    chat_template: ChatTemplate = None,
    depth: Depth = "adaptive",
    width: Width = 1,
    engine: Engine = "sync",
    max_tokens: MaxTokens = 1024,
    max_step_tokens: MaxStepTokens = 100,
    verifier: Verifier = DEFAULT_VERIFIER,
    threshold: Threshold = None,
    temperature: Temperature = 0.0,
    timeout: Timeout = 300.0,
    baseline: bool = typer.Option(False, "--baseline", help="also run the target alone (AR) and report the speedup"),
    probe: Optional[Path] = typer.Option(
        None, help="with --baseline and a fixed γ: the servers' costs (lookahead servers probe --json), to print the "
        "measured speedup beside the ceiling of its round rule (bench replay)"),
    trace: Optional[Path] = typer.Option(None, help="write the run's timeline here as one HTML page"),
    fork: Fork = "streamed",
    as_json: AsJson = False,
):
    """Answer QUESTION with lookahead reasoning."""
    if not question.strip():
        raise LookaheadError("the question is empty")
    sampling = {"temperature": temperature}
    config = make_config(
        **depth_options(depth), width=width, engine=engine, fork=fork, max_tokens=max_tokens,
        max_step_tokens=max_step_tokens, verifier_threshold=threshold, verifier=verifier, draft_sampling=sampling,
        target_sampling=sampling, request_timeout_s=timeout,
    )
    if probe is not None and not probe.is_file():
        raise LookaheadError(f"{probe}: no such probe file")
    server_set = endpoints_from(endpoints, draft_url, target_url, judge_url, chat_template)
    from rich.console import Console

    from lookahead_reasoning.cli.display import RoundPrinter, ceiling_line, print_answer, run_json
    from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

    reasoner = LookaheadReasoner(server_set, config, remember_costs=True)
    if baseline:
        reasoner.warm_prompt(question)  # LR and AR both find the prompt prefilled: neither pays it alone
    result = reasoner.run(question, on_round=RoundPrinter(err, reasoner.policy))
    base = None
    if baseline:
        err.print("[bold]running the target alone (AR baseline)…[/]")
        base = reasoner.baseline(question)
    if trace is not None:
        from lookahead_reasoning.eval.trace import write_trace

        extra = {"speedup": base.wall_time_s / max(result.stats.wall_time_s, 1e-9)} if base else None
        write_trace(result.round_log, trace, f"lookahead run: {question[:80]}", extra)
        err.print(f"trace written to {trace}")
    ceiling = ceiling_line(result, base, probe, config) if base is not None and probe is not None else None
    if as_json:
        print(json.dumps({**run_json(result, base), **({"ceiling": ceiling} if ceiling else {})}))
    else:
        print_answer(Console(), result, base)
        if ceiling:
            Console().print(ceiling)


def trace(
    run_file: Path = typer.Argument(..., help="a `lookahead run --json` file"),
    out: Path = typer.Option(Path("trace.html"), help="where to write the HTML page"),
):
    """Draw a run's timeline, round by round, as one self-contained HTML page; print its summary."""
    from lookahead_reasoning.eval.trace import load_rounds, summary_lines, write_trace

    rounds, data = load_rounds(run_file)
    write_trace(rounds, out, f"lookahead trace: {run_file.name}", data)
    for line in summary_lines(rounds):
        print(line)
    err.print(f"trace written to {out}")


def demo(
    draft: str = typer.Option("qwen2.5-coder-0.5b", help="draft model"),
    target: str = typer.Option("qwen2.5-coder-1.5b", help="target model (also the judge)"),
    question: str = typer.Option(DEMO_QUESTION, help="the question"),
    depth: Depth = "adaptive",
    max_tokens: MaxTokens = 320,
    max_step_tokens: MaxStepTokens = 80,
    threshold: Threshold = None,
    device: Device = "auto",
):
    """Prepare models, launch servers, answer one question with LR and with AR, and stop."""
    started = time.perf_counter()
    config = make_config(**depth_options(depth), max_tokens=max_tokens, max_step_tokens=max_step_tokens,
                         verifier_threshold=threshold)
    from rich.console import Console

    from lookahead_reasoning.cli.display import (
        RoundPrinter, plan_check, plan_line, print_answer, print_comparison, print_cost_story,
    )
    from lookahead_reasoning.runtime.servers.specs import LaunchSpec
    from lookahead_reasoning.runtime.servers.starting import ServerGroup
    from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

    group = ServerGroup(LaunchSpec(draft, target, device=device), log=lambda m: err.print(m))
    try:
        with err.status("preparing models and starting servers (about a minute per server on a CPU)…"):
            group.start()
        if group.plan.device == "cpu":
            err.print(
                "[yellow]CPU mode: what the target's parallel branches, the draft and the judge cost depends on "
                "the CPU (nearly free branches in bfloat16 on AMX, about linear in float32). The adaptive policy "
                "measures them and decides; the summary says what it found.[/]"
            )
        reasoner = LookaheadReasoner(group.endpoints(), config)
        planned = None
        if config.adaptive_depth:
            reasoner.policy.measure_drafting = True  # the summary reports c, j and α, so draft at least once
            with err.status("learning the servers' costs on a warm-up question…"):
                reasoner.warm_prompt(WARM_UP_QUESTION)
                reasoner.run(WARM_UP_QUESTION)
            planned = reasoner.policy.cost_estimate()
            err.print(plan_line(planned))
        err.print(f"[bold]question:[/] {question}")
        reasoner.warm_prompt(question)  # LR and AR both find the prompt prefilled: neither pays it alone
        with err.status("lookahead reasoning…"):
            result = reasoner.run(question, on_round=RoundPrinter(err, reasoner.policy))
        with err.status("the target alone (AR baseline)…"):
            base = reasoner.baseline(question)
        console = Console()
        print_answer(console, result, base)
        print_comparison(console, result, base)
        if planned is not None:
            console.print(plan_check(planned, result, base))
        print_cost_story(console, result, config.engine)
    finally:
        group.stop()
    err.print(f"demo finished in {time.perf_counter() - started:.0f} s")
