"""Reasoning commands: `lookahead run` and `lookahead demo`."""

from __future__ import annotations

import json
import time

import typer

from lookahead_reasoning.cli.options import (
    DEFAULT_VERIFIER, AsJson, ChatTemplate, Depth, Device, DraftUrl, EndpointsFile, Engine, JudgeUrl, MaxStepTokens,
    MaxTokens, TargetUrl, Temperature, Threshold, Timeout, Verifier, Width, depth_options, endpoints_from, err,
    make_config,
)
from lookahead_reasoning.errors import LookaheadError

DEMO_QUESTION = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
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
    as_json: AsJson = False,
):
    """Answer QUESTION with lookahead reasoning."""
    if not question.strip():
        raise LookaheadError("the question is empty")
    sampling = {"temperature": temperature}
    config = make_config(
        **depth_options(depth), width=width, engine=engine, max_tokens=max_tokens, max_step_tokens=max_step_tokens,
        verifier_threshold=threshold, verifier=verifier, draft_sampling=sampling, target_sampling=sampling,
        request_timeout_s=timeout,
    )
    server_set = endpoints_from(endpoints, draft_url, target_url, judge_url, chat_template)
    from rich.console import Console

    from lookahead_reasoning.cli.display import RoundPrinter, print_answer, run_json
    from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

    reasoner = LookaheadReasoner(server_set, config, remember_costs=True)
    if baseline:
        reasoner.warm_prompt(question)  # LR and AR both find the prompt prefilled: neither pays it alone
    result = reasoner.run(question, on_round=RoundPrinter(err, reasoner.policy))
    base = None
    if baseline:
        err.print("[bold]running the target alone (AR baseline)…[/]")
        base = reasoner.baseline(question)
    if as_json:
        print(json.dumps(run_json(result, base)))
    else:
        print_answer(Console(), result, base)


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

    from lookahead_reasoning.cli.display import RoundPrinter, print_answer, print_comparison, print_cost_story
    from lookahead_reasoning.runtime.servers.launcher import ServerGroup
    from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

    group = ServerGroup(draft, target, device=device, log=lambda m: err.print(m))
    try:
        with err.status("preparing models and starting servers (about a minute per server on a CPU)…"):
            group.start()
        if group.device == "cpu":
            err.print(
                "[yellow]CPU mode: what the target's parallel branches, the draft and the judge cost depends on "
                "the CPU (nearly free branches in bfloat16 on AMX, about linear in float32). The adaptive policy "
                "measures them and decides; the summary says what it found.[/]"
            )
        reasoner = LookaheadReasoner(group.endpoints(), config)
        if hasattr(reasoner.policy, "measure_drafting"):
            reasoner.policy.measure_drafting = True  # the summary reports c, j and α, so draft at least once
        err.print(f"[bold]question:[/] {question}")
        reasoner.warm_prompt(question)  # LR and AR both find the prompt prefilled: neither pays it alone
        with err.status("lookahead reasoning…"):
            result = reasoner.run(question, on_round=RoundPrinter(err, reasoner.policy))
        with err.status("the target alone (AR baseline)…"):
            base = reasoner.baseline(question)
        console = Console()
        print_answer(console, result, base)
        print_comparison(console, result, base)
        print_cost_story(console, result, config.engine)
    finally:
        group.stop()
    err.print(f"demo finished in {time.perf_counter() - started:.0f} s")
