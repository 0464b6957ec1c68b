"""Server commands: `lookahead servers probe`, the servers' costs measured directly."""

from __future__ import annotations

import typer

from lookahead_reasoning.cli.options import (
    AsJson, ChatTemplate, DraftUrl, EndpointsFile, JudgeUrl, TargetUrl, Timeout, endpoints_from, err, number_list,
)

servers_app = typer.Typer(help="Measure the running servers.", no_args_is_help=True)


@servers_app.command("probe")
def probe(
    endpoints: EndpointsFile = None,
    draft_url: DraftUrl = None,
    target_url: TargetUrl = None,
    judge_url: JudgeUrl = None,
    chat_template: ChatTemplate = None,
    widths: str = typer.Option("2,3,4,5,6,7,8", "--widths", help="fork widths n to time B(n) at"),
    tokens: int = typer.Option(40, "--tokens", help="L: tokens each timed request writes"),
    short_tokens: int = typer.Option(8, "--short-tokens", help="the second length of the fit T = o + L·t"),
    repeats: int = typer.Option(3, "--repeats", help="measurements of each figure; the median is reported"),
    prompt_tokens: int = typer.Option(300, "--prompt-tokens", help="length of the fresh prompt that times prefill"),
    timeout: Timeout = 300.0,
    as_json: AsJson = False,
):
    """Time the servers directly: B(n), the target's costs, c, the judge's cost, the draft and target side by
    side, and the prefill rates.

    The ground truth for the costs that the adaptive policy learns (see docs/cpu.md, "Measuring the
    servers"). The servers should be otherwise idle while it runs.
    """
    width_list = number_list(widths, "widths", int, minimum=2)
    servers = endpoints_from(endpoints, draft_url, target_url, judge_url, chat_template)
    from lookahead_reasoning.eval.server_probe import check_settings, probe_servers

    check_settings(tokens, short_tokens, width_list, repeats, prompt_tokens)
    result = probe_servers(servers, tokens=tokens, widths=width_list, repeats=repeats, short_tokens=short_tokens,
                           prompt_tokens=prompt_tokens, timeout_s=timeout,
                           log=lambda message: err.print(message, highlight=False, soft_wrap=True))
    if as_json:
        print(result.model_dump_json())
    else:
        from rich.console import Console

        print_probe(Console(), result)


def shown(value: float | None, form: str) -> str:
    return "n/a" if value is None else form.format(value)


def print_probe(console, result) -> None:
    """Two tables: B(n), then the per-token costs with what each means for the cost model."""
    from rich.table import Table

    L = result.tokens
    forks = Table(title=f"B(n): n parallel requests of {L} tokens over one (median of {result.repeats})")
    for column in ("n", "one request (s)", "n requests (s)", "B(n)"):
        forks.add_column(column, justify="right")
    for w in result.fork:
        forks.add_row(str(w.width), f"{w.single_s:.3f}", f"{w.batch_s:.3f}", f"{w.b:.2f}")
    console.print(forks)
    costs = Table(title="costs, each request alone")
    for column, justify in (("figure", "left"), ("value", "right"), ("meaning", "left")):
        costs.add_column(column, justify=justify)
    rows = [
        ("target t", f"{result.target.per_token_s * 1000:.2f} ms/token", f"fit T = o + L·t at {result.short_tokens} and {L} tokens"),
        ("target o", f"{result.target.fixed_s * 1000:.1f} ms", "a request's fixed cost"),
        ("draft t", f"{result.draft.per_token_s * 1000:.2f} ms/token", "the same fit on the draft"),
        ("c", f"{result.c:.3f}", f"draft over target, one request of {L} tokens each"),
        ("c per token", f"{result.c_per_token:.3f}", "draft t over target t"),
        ("judge", f"{result.judge_s * 1000:.1f} ms", "one judge call, one pair of fresh steps"),
        ("judge in target tokens", f"{result.judge_target_tokens:.1f}", "judge / target t"),
        ("j", f"{result.j:.3f}", f"judge / one target request of {L} tokens"),
        ("target beside draft", shown(result.target_beside_draft, "{:.2f}×"),
         "a target request sent with a draft request, over alone"),
        ("draft beside target", shown(result.draft_beside_target, "{:.2f}×"),
         "a draft request sent with a target request, over alone"),
        ("together over serial", shown(result.together_over_serial, "{:.2f}"),
         "both sent at once over one after the other (< 1: overlapping drafting and verifying pays)"),
        ("prefill, uncached", f"{result.prefill_uncached_s_per_token * 1000:.3f} ms/token",
         f"a fresh prompt of {result.prefill_prompt_tokens} tokens, less o + t"),
        ("prefill, cached", f"{result.prefill_cached_s_per_token * 1000:.3f} ms/token", "the same prompt again"),
    ]
    for row in rows:
        costs.add_row(*row)
    console.print(costs)
