"""AR and lookahead-reasoning methods side by side, problem by problem, on running servers.

    python examples/side_by_side.py --endpoints ENDPOINTS --data ../shared/data/gsm8k_test.jsonl \
        --problems 20-24 --methods sync-adaptive,sync-1,sync-2 --max-tokens 512 --out side_by_side.jsonl \
        [--probe probe.json]

For each problem the target alone (AR) runs first, then each method, one after another on the same
servers; each method keeps one reasoner across the problems, so the adaptive policy carries what it
learned from problem to problem (as `lookahead run` does with its saved costs). One JSON line per problem
is appended to --out as it finishes (a rerun skips the problems already there). At the end it prints,
per method, the speedup against AR in wall time and per token (an answer of another length is not the
same work), the acceptance, and how many answers equal AR's.

With `--probe` (the JSON of `lookahead servers probe --json` on the same servers) it also prints, for each
method of a fixed γ, the ceiling: per problem, the theory's speedup of a problem of that many steps at the
acceptance the problem drew, with the probe's c, j and B(n), and steps of equal length
(`theory.finite_speedup`); over the problems, AR's total time over the time those ceilings allow. What the
measured speedup misses of it is time the theory does not count (steps of unequal lengths, the client).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from lookahead_reasoning import LookaheadConfig, LookaheadReasoner
from lookahead_reasoning.cli.options import depth_options  # `--depth adaptive` as `lookahead run` takes it
from lookahead_reasoning.eval.server_probe import ServerProbe
from lookahead_reasoning.runtime.servers.endpoints import load_endpoints
from lookahead_reasoning.runtime.theory import finite_speedup


def method_config(method: str, max_tokens: int) -> LookaheadConfig:
    """`ENGINE-DEPTH[-FORK]`: sync-2, async-adaptive, sync-2-streamed (LookaheadConfig.fork), ..."""
    engine, _, rest = method.partition("-")
    depth, _, fork = rest.partition("-")
    if engine not in ("sync", "async") or not (depth == "adaptive" or depth.isdigit()) or fork not in ("", "streamed",
                                                                                                    "batched"):
        raise SystemExit(f"error: a method is ENGINE-DEPTH[-FORK] (sync-2, async-adaptive, sync-2-streamed), "
                         f"got {method!r}")
    return LookaheadConfig(engine=engine, max_tokens=max_tokens, fork=fork or "batched", **depth_options(depth))


def problem_range(text: str) -> range:
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


def branch_costs(probe: ServerProbe):
    """B(n) from the probe's widths: measured where it measured, linear between, the widest beyond."""
    known = {1: 1.0, **{w.width: w.b for w in probe.fork}}
    widths = sorted(known)

    def cost(n: int) -> float:
        if n in known:
            return known[n]
        if n > widths[-1]:
            return known[widths[-1]]
        below = max(w for w in widths if w < n)
        above = min(w for w in widths if w > n)
        return known[below] + (known[above] - known[below]) * (n - below) / (above - below)

    return cost


def ceiling(rows: list[dict], method: str, probe: ServerProbe) -> tuple[float, list[float]] | None:
    """The theory's speedup per problem at the acceptance it drew, and over the problems (None: adaptive γ)."""
    engine, _, rest = method.partition("-")
    depth = rest.partition("-")[0]
    if not depth.isdigit() or any("steps" not in row[method] for row in rows):
        return None  # adaptive γ, or rows written before steps were recorded
    per_problem, costs = [], branch_costs(probe)
    for row in rows:
        run = row[method]
        alpha = run["accepted"] / run["judged"] if run["judged"] else 0.0
        per_problem.append(finite_speedup(engine, int(depth), alpha, probe.c, probe.j, branch_cost=costs,
                                          steps=max(1, run["steps"])))
    ar = [row["ar"]["seconds"] for row in rows]
    return sum(ar) / sum(s / f for s, f in zip(ar, per_problem)), per_problem


def compare(rows: list[dict], methods: list[str], probe: ServerProbe | None = None) -> list[str]:
    lines = []
    for method in methods:
        lr_s = sum(r[method]["seconds"] for r in rows)
        ar_s = sum(r["ar"]["seconds"] for r in rows)
        lr_tokens = sum(r[method]["tokens"] for r in rows)
        ar_tokens = sum(r["ar"]["tokens"] for r in rows)
        accepted = sum(r[method]["accepted"] for r in rows)
        judged = sum(r[method]["judged"] for r in rows)
        same = sum(r[method]["answer"] == r["ar"]["answer"] for r in rows)
        lines.append(f"{method}: {ar_s / lr_s:.3f}x AR wall, {(ar_s / ar_tokens) / (lr_s / lr_tokens):.3f}x per token "
                     f"({lr_s:.0f} s / {lr_tokens} tokens against {ar_s:.0f} s / {ar_tokens}); accepted {accepted}/"
                     f"{judged}; answers equal to AR's {same}/{len(rows)}")
        bound = ceiling(rows, method, probe) if probe is not None else None
        if bound is not None:
            total, per_problem = bound
            lines.append(f"  ceiling {total:.3f}x (c {probe.c:.2f}, j {probe.j:.2f}, B(2) {branch_costs(probe)(2):.2f}); "
                         "per problem " + ", ".join(f"{r['problem']}: {f:.2f}x" for r, f in zip(rows, per_problem)))
    return lines


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="JSON Lines with a `question` field")
    parser.add_argument("--problems", default="0-4", help="0-based lines of --data, FIRST-LAST")
    parser.add_argument("--methods", default="sync-adaptive,sync-1,sync-2")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--probe", type=Path, help="`lookahead servers probe --json` output: adds the ceilings")
    args = parser.parse_args(argv)
    probe = ServerProbe.model_validate_json(args.probe.read_text()) if args.probe else None
    methods = args.methods.split(",")
    problems = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    endpoints = load_endpoints(args.endpoints)
    reasoners = {m: LookaheadReasoner(endpoints, method_config(m, args.max_tokens)) for m in methods}
    alone = LookaheadReasoner(endpoints, LookaheadConfig(max_tokens=args.max_tokens))
    rows = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.exists() else []
    done = {row["problem"] for row in rows}
    for index in problem_range(args.problems):
        if index in done:
            continue
        question = problems[index]["question"]
        alone.warm_prompt(question)  # every method finds the prompt prefilled: none pays it alone
        started = time.perf_counter()
        base = alone.baseline(question)
        row = {"problem": index, "ar": {"seconds": time.perf_counter() - started, "tokens": base.output_tokens,
                                        "answer": base.answer}}
        for method, reasoner in reasoners.items():
            started = time.perf_counter()
            result = reasoner.run(question)
            judged = [r for r in result.round_log if r.positions]
            row[method] = {"seconds": time.perf_counter() - started, "tokens": result.stats.output_tokens,
                           "answer": result.answer, "accepted": sum(r.accepted for r in judged),
                           "judged": sum(r.positions for r in judged), "depths": [r.depth for r in result.round_log],
                           "steps": len(result.steps)}
        with args.out.open("a") as out:
            out.write(json.dumps(row) + "\n")
        rows.append(row)
        print(f"problem {index}: " + ", ".join(f"{m} {row['ar']['seconds'] / row[m]['seconds']:.3f}x" for m in methods),
              flush=True)
    lines = compare(rows, methods, probe)
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
