"""How answers and their rounds look on the terminal and in `--json`."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lookahead_reasoning.runtime.results import CostEstimate
from lookahead_reasoning.runtime.adaptive.depth import DepthPolicy
from lookahead_reasoning.runtime.results import BaselineResult, LookaheadResult, RoundRecord
from lookahead_reasoning.runtime.adaptive.theory import best_depth, engine_speedup


def _short(text: str, width: int = 90) -> str:
    flat = " ".join(text.split())
    return escape(flat if len(flat) <= width else flat[: width - 1] + "…")


def describe_costs(estimate: CostEstimate | None) -> str | None:
    """One line: what the adaptive policy measured and what it would do now."""
    if estimate is None or estimate.target_s_per_token is None:
        return None
    b = ", ".join(f"B({n}) {v:.2f}" for n, v in estimate.branch_cost.items()) or "B n/a"
    c = "n/a" if estimate.c is None else f"{estimate.c:.2f}"
    j = "n/a" if estimate.j is None else f"{estimate.j:.2f}"
    alpha = "n/a" if estimate.alpha is None else f"{estimate.alpha:.2f}"
    plan = "AR" if estimate.planned_depth == 0 else f"γ = {estimate.planned_depth}"
    if estimate.planned_depth and (estimate.planned_width or 1) > 1:
        plan += f", W = {estimate.planned_width}"
    gain = "" if estimate.expected_speedup is None else f", expected {estimate.expected_speedup:.2f}× AR"
    return f"costs: {b}, c {c}, j {j}, α {alpha} → {plan}{gain}{_trees(estimate)}"


def plan_line(estimate: CostEstimate | None) -> str:
    """What the adaptive policy plans for the next answer, from what it has learned so far."""
    if estimate is None or estimate.expected_speedup is None:
        return "planned: nothing yet (the policy is still learning the costs)"
    if not estimate.planned_depth:
        return "planned: AR (no drafting round is expected to beat the target alone here)"
    width = f", W = {estimate.planned_width}" if (estimate.planned_width or 1) > 1 else ""
    alpha = "" if estimate.alpha is None else f" at α̂ = {estimate.alpha:.2f}"
    return f"planned: γ = {estimate.planned_depth}{width}, expected {estimate.expected_speedup:.2f}× AR{alpha}"


def plan_check(planned: CostEstimate | None, result: LookaheadResult, baseline: BaselineResult) -> str:
    """The plan made before the answer beside what the answer measured: in wall time, and per token, which is
    what the plan prices (accepted draft steps can make LR's answer longer or shorter than AR's)."""
    s = result.stats
    wall = baseline.wall_time_s / max(s.wall_time_s, 1e-9)
    per_token = (s.output_tokens / max(s.wall_time_s, 1e-9)) / (baseline.output_tokens / max(baseline.wall_time_s, 1e-9))
    at = "" if s.acceptance_rate is None else f" at α = {s.acceptance_rate:.2f}"
    return f"{plan_line(planned)}; measured {per_token:.2f}× per token ({wall:.2f}× in wall time){at}"


def _trees(estimate: CostEstimate) -> str:
    """With --width W > 1 and chains (or AR) chosen: what trees would give, so the choice is visible."""
    if (estimate.planned_width or 1) > 1 or not estimate.width_speedups:
        return ""
    widest = max(estimate.width_speedups)
    if widest == 1:
        return ""
    return f" (W = {widest} would give {estimate.width_speedups[widest]:.2f}×: staying at W = 1)"


class RoundPrinter:
    """Prints each round as it finishes: drafted steps with verdicts, then the kept steps.

    Given the adaptive policy, it also prints what the policy has measured (the cost model).
    """

    def __init__(self, console: Console, policy: DepthPolicy | None = None):
        self.console = console
        self.policy = policy

    def __call__(self, record: RoundRecord) -> None:
        c = self.console
        c.print(
            f"[bold]round {record.index + 1}[/]  accepted {record.accepted}/{len(record.judged)}  "
            f"(draft {record.draft_s:.1f} s, target {record.target_s:.1f} s, judge {record.verify_s:.1f} s)"
        )
        for k, j in enumerate(record.judged, 1):
            mark = "[green]✓[/]" if j.accept else "[red]✗[/]"
            score = "" if j.score is None else f" p={j.score:.2f}"
            c.print(f"  draft {k} {mark} [dim]{j.method}{score}[/] {_short(j.draft)}")
        for step in record.kept:
            colour = "cyan" if step.source == "draft" else "magenta"
            c.print(f"  [{colour}]kept ({step.source})[/] {_short(step.text)}")
        costs = describe_costs(self.policy.cost_estimate()) if self.policy is not None else None
        if costs:
            c.print(f"  [dim]{escape(costs)}[/]")


def run_json(result: LookaheadResult, baseline: BaselineResult | None = None) -> dict:
    """The `lookahead run --json` object."""
    stats = result.stats
    out = {
        "text": result.text,
        "answer": result.answer,
        "steps": [{"text": s.text, "source": s.source, "verifier_score": s.verifier_score} for s in result.steps],
        "stats": stats.model_dump(),
        "round_log": [record.model_dump() for record in result.round_log],  # `lookahead trace` draws it
    }
    if baseline is not None:
        out["baseline"] = {
            "text": baseline.text,
            "answer": baseline.answer,
            "wall_time_s": baseline.wall_time_s,
            "output_tokens": baseline.output_tokens,
            "finish": baseline.finish,
        }
        out["speedup"] = baseline.wall_time_s / stats.wall_time_s if stats.wall_time_s > 0 else None
    return out


def print_answer(console: Console, result: LookaheadResult, baseline: BaselineResult | None = None) -> None:
    s = result.stats
    console.rule("lookahead reasoning")
    console.print(result.text, markup=False, highlight=False)
    if s.finish == "max_tokens":
        console.print(f"[yellow]stopped at the token cap ({s.output_tokens} tokens): the answer may be incomplete[/]")
    console.print(f"[bold]answer:[/] {escape(str(result.answer))}")
    rate = "n/a" if s.acceptance_rate is None else f"{s.acceptance_rate:.2f}"
    console.print(
        f"rounds {s.rounds}, draft steps accepted {s.draft_steps_accepted}/{s.draft_steps_judged} "
        f"(α = {rate}), {s.output_tokens} tokens in {s.wall_time_s:.1f} s"
    )
    for note in s.degraded:
        console.print(f"[yellow]degraded:[/] {escape(note)}")
    if baseline is not None:
        console.rule("target alone (AR)")
        console.print(baseline.text, markup=False, highlight=False)
        console.print(f"[bold]answer:[/] {escape(str(baseline.answer))}")
        console.print(f"speedup (AR time / LR time): {baseline.wall_time_s / max(s.wall_time_s, 1e-9):.2f}×")


def ceiling_line(result: LookaheadResult, baseline: BaselineResult, probe_path, config) -> str | None:
    """The measured speedup beside the replay's ceiling for this round rule at the measured α, on the baseline's own
    steps with the probe's costs (eval/replay.py); None with adaptive γ (no one rule to replay)."""
    from lookahead_reasoning.eval.replay import ceiling_of, load_costs, rule_of, step_lengths

    if config.adaptive_depth:
        return None
    alpha = result.stats.acceptance_rate or 0.0
    lengths = step_lengths(baseline.text, baseline.output_tokens, config.delimiter, config.max_step_tokens)
    rule = rule_of(config.engine, config.fork)
    ceiling = ceiling_of([lengths], load_costs(probe_path), rule, config.depth, alpha)
    measured = baseline.wall_time_s / max(result.stats.wall_time_s, 1e-9)
    return (f"ceiling ({rule} rounds, γ = {config.depth}, α {alpha:.2f}, AR's own steps replayed): {ceiling:.2f}×; "
            f"measured {measured:.2f}×, efficiency {measured / ceiling:.2f}")


def print_comparison(console: Console, result: LookaheadResult, baseline: BaselineResult) -> None:
    s = result.stats
    table = Table(title="LR against AR on the same servers")
    for col in ("method", "wall time (s)", "tokens", "tokens/s", "answer"):
        table.add_column(col)
    table.add_row("AR (target alone)", f"{baseline.wall_time_s:.1f}", str(baseline.output_tokens),
                  f"{baseline.output_tokens / max(baseline.wall_time_s, 1e-9):.2f}", escape(str(baseline.answer)))
    table.add_row("LR (lookahead)", f"{s.wall_time_s:.1f}", str(s.output_tokens),
                  f"{s.output_tokens / max(s.wall_time_s, 1e-9):.2f}", escape(str(result.answer)))
    console.print(table)
    rate = "n/a" if s.acceptance_rate is None else f"{s.acceptance_rate:.2f}"
    ratio = "n/a" if s.target_branch_cache_ratio is None else f"{s.target_branch_cache_ratio:.2f}"
    console.print(
        f"speedup {baseline.wall_time_s / max(s.wall_time_s, 1e-9):.2f}×, acceptance rate {rate}, "
        f"target-branch cached/prompt tokens {ratio}"
    )


GPU_LIKE = {"c": 0.05, "judge": 0.1}  # a small draft and a one-token judge answer, when branches are free


def print_cost_story(console: Console, result: LookaheadResult, engine: str = "sync") -> None:
    """What the run measured, what the policy decided and why, and what the same α would give on a GPU."""
    estimate = result.stats.cost_model
    if estimate is None or not estimate.branch_cost:
        console.print("the adaptive policy had too little data to judge the costs (a fixed γ ran)")
        return
    b = ", ".join(f"B({n}) = {v:.2f}" for n, v in estimate.branch_cost.items())
    j = "n/a" if estimate.j is None else f"{estimate.j:.2f}"
    alpha = result.stats.acceptance_rate if result.stats.acceptance_rate is not None else estimate.alpha
    c = "n/a (never drafted)" if estimate.c is None else f"{estimate.c:.2f}"
    shown_alpha = "n/a" if alpha is None else f"{alpha:.2f}"
    console.print(f"[bold]measured:[/] {b} (a fork of n branches over one target step), c = {c}, "
                  f"j = {j} (one judged pair, in target steps), α = {shown_alpha}")
    if estimate.planned_depth == 0:
        worst = max(estimate.branch_cost.values())
        if worst >= 1.5 or estimate.c is None or alpha is None:
            console.print(f"[bold]decision:[/] branches cost up to {worst:.1f}× one step here, so LR would lose: "
                          "running as AR (with a rare probe)")
        else:
            slope = estimate.branch_slope or 0.0
            best = max(engine_speedup(engine, depth, min(alpha, 0.999), max(estimate.c, 1e-3), estimate.j or 0.0,
                                      branch_cost=lambda n: 1.0 + slope * (n - 1)) for depth in range(1, 9))
            console.print(f"[bold]decision:[/] branches are nearly free here, but at c = {estimate.c:.2f} and "
                          f"α = {alpha:.2f} drafting would give at most {best:.2f}× AR: running as AR "
                          "(with a rare probe)")
    else:
        width = f", W = {estimate.planned_width}" if (estimate.planned_width or 1) > 1 else ""
        console.print(f"[bold]decision:[/] drafting γ = {estimate.planned_depth}{width}, expected "
                      f"{estimate.expected_speedup:.2f}× AR at these costs{_trees(estimate)}")
    if alpha is None:
        return
    depth, speedup = best_depth(
        lambda depth: engine_speedup(engine, depth, min(alpha, 0.999), GPU_LIKE["c"], GPU_LIKE["judge"]), 8)
    console.print(f"[bold]projection (theory, not a measurement):[/] at α = {alpha:.2f} on a GPU where branches "
                  f"are free (B = 1, c = {GPU_LIKE['c']}, j = {GPU_LIKE['judge']}), γ = {depth} would give "
                  f"{speedup:.2f}× AR")
