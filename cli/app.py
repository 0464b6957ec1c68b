"""The `lookahead` command line: one Typer app, its commands grouped by what users do.

- serving: launch, stop, serve, weights (cli/serving.py)
- reasoning: run, demo (cli/reasoning.py)
- evaluation: eval, report, sweep (cli/evaluation.py); bench sim|load|serve|soak|replay, simserver
  (cli/benchmarks.py); verifiers (cli/verifiers.py)
- servers: servers probe (cli/servers.py)

Parsing the command line does not import SGLang; a command imports it when it runs a program.
"""

from __future__ import annotations

import os
import sys
import warnings

import click
import typer

from lookahead_reasoning.cli import benchmarks, evaluation, reasoning, servers, serving, verifiers
from lookahead_reasoning.cli.options import err
from lookahead_reasoning.errors import LookaheadError, first_line

app = typer.Typer(
    help="Lookahead reasoning on SGLang servers.", no_args_is_help=True, add_completion=False,
    pretty_exceptions_enable=False,
)
for command in (serving.launch, serving.stop, serving.serve):
    app.command(rich_help_panel="Serving")(command)
app.add_typer(serving.weights_app, name="weights", rich_help_panel="Serving")
app.add_typer(servers.servers_app, name="servers", rich_help_panel="Serving")
for command in (reasoning.run, reasoning.demo, reasoning.trace):
    app.command(rich_help_panel="Reasoning")(command)
app.command("eval", rich_help_panel="Evaluation")(evaluation.eval_command)
app.command("report", rich_help_panel="Evaluation")(evaluation.report_command)
app.command("sweep", rich_help_panel="Evaluation")(evaluation.sweep_command)
app.add_typer(benchmarks.bench_app, name="bench", rich_help_panel="Evaluation")
app.command(rich_help_panel="Evaluation")(benchmarks.simserver)
app.add_typer(verifiers.verifiers_app, name="verifiers", rich_help_panel="Evaluation")


def _interrupted() -> None:
    """Ctrl-C: every `finally` has run and finished results are on disk, so leave now.

    A plain exit would wait for SGLang's frontend threads to finish their HTTP requests in
    flight, which on a CPU can take minutes.
    """
    err.print("interrupted")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


def main(args: list[str] | None = None) -> None:
    warnings.filterwarnings("ignore", message="Error in stream_executor")
    try:
        code = app(args=args, standalone_mode=False)  # typer turns Ctrl-C into a returned 130 here
        if code == 130:
            _interrupted()
        if isinstance(code, int) and code:
            sys.exit(code)
    except LookaheadError as error:
        err.print(f"[red]error:[/] {error}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except (typer.Abort, KeyboardInterrupt):
        _interrupted()
    except (click.ClickException, typer.TyperException) as error:  # usage errors, click's or typer's copy's
        error.show()  # a command group given no command has printed its help already and shows nothing more
        sys.exit(error.exit_code)
    except Exception as error:
        if os.environ.get("LOOKAHEAD_DEBUG"):
            raise
        err.print(
            f"[red]error:[/] unexpected {type(error).__name__}: {first_line(error)} (LOOKAHEAD_DEBUG=1 shows the traceback)",
            highlight=False, soft_wrap=True,
        )
        sys.exit(1)
