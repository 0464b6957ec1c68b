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
from pydantic import ValidationError
from rich.console import Console

from lookahead_reasoning.runtime import models as offline_models
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.display import RoundPrinter, print_answer, print_comparison, run_json
from lookahead_reasoning.runtime.endpoints import (
    Endpoints,
    default_endpoints_path,
    load_endpoints,
    save_endpoints,
)
from lookahead_reasoning.runtime.errors import LookaheadError, first_line
from lookahead_reasoning.runtime.launcher import ServerGroup, stop_launcher
from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

app = typer.Typer(
    help="Lookahead reasoning on SGLang servers.", no_args_is_help=True, add_completion=False,
    pretty_exceptions_enable=False,
)
models_app = typer.Typer(help="Offline models for machines without the Hugging Face hub.", no_args_is_help=True)
app.add_typer(models_app, name="models")
err = Console(stderr=True)

DEMO_QUESTION = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)


def _config(**values) -> LookaheadConfig:
    try:
        return LookaheadConfig(**values)
    except ValidationError as error:
        problem = error.errors()[0]
        raise LookaheadError(f"invalid {'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None


def _depth_options(depth: str) -> dict:
    """`--depth N` or `--depth adaptive` (which starts at the default γ)."""
    if depth == "adaptive":
        return {"adaptive_depth": True}
    try:
        return {"depth": int(depth)}
    except ValueError:
        raise LookaheadError(f"depth must be a number or 'adaptive', got {depth!r}") from None


def _endpoints(path: Optional[Path], draft_url, target_url, judge_url, chat_template) -> Endpoints:
    if draft_url or target_url or judge_url:
        if not (draft_url and target_url):
            raise LookaheadError("give --draft-url and --target-url (and optionally --judge-url), or --endpoints")
        try:
            return Endpoints.from_urls(draft_url, target_url, judge_url, chat_template)
        except ValidationError as error:
            raise LookaheadError(f"bad URL: {error.errors()[0]['msg']}") from None
    return load_endpoints(path or default_endpoints_path())


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
    threshold: float = typer.Option(0.8, help="judge accepts when P(yes) >= this"),
    temperature: float = typer.Option(0.0, help="sampling temperature of draft and target"),
    timeout: float = typer.Option(300.0, help="seconds one server request may take"),
    baseline: bool = typer.Option(False, "--baseline", help="also run the target alone (AR) and report the speedup"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object to stdout"),
):
    """Answer QUESTION with lookahead reasoning."""
    if not question.strip():
        raise LookaheadError("the question is empty")
    sampling = {"temperature": temperature}
    config = _config(
        **_depth_options(depth), width=width, engine=engine, max_tokens=max_tokens, max_step_tokens=max_step_tokens, judge_threshold=threshold,
        draft_sampling=sampling, target_sampling=sampling, request_timeout_s=timeout,
    )
    reasoner = LookaheadReasoner(_endpoints(endpoints, draft_url, target_url, judge_url, chat_template), config)
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
    config = _config(depth=depth, max_tokens=max_tokens, max_step_tokens=max_step_tokens, judge_threshold=threshold)
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


def main() -> None:
    warnings.filterwarnings("ignore", message="Error in stream_executor")
    try:
        app(standalone_mode=False)
    except LookaheadError as error:
        err.print(f"[red]error:[/] {error}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except (typer.Abort, KeyboardInterrupt):
        err.print("interrupted")
        sys.exit(130)
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
