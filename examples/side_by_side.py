"""AR and lookahead-reasoning methods side by side, problem by problem, on running servers.

    python examples/side_by_side.py --endpoints ENDPOINTS --data ../shared/data/gsm8k_test.jsonl \
        --problems 20-24 --methods sync-adaptive,sync-1,sync-2 --max-tokens 512 --out side_by_side.jsonl \
        [--probe probe.json]

For each problem the target alone (AR) runs first, then each method, one after another on the same
servers; each method keeps one reasoner across the problems, so the adaptive policy carries what it
learned from problem to problem (as `lookahead run` does with its saved costs). One JSON line per problem
is appended to --out as it finishes (a rerun skips the problems already there). At the end it prints,
per method, the speedup against AR in wall time (with a 95 % bootstrap interval over the problems, and the
median problem's) and per token (an answer of another length is not the same work), the acceptance, and how
many answers equal AR's.

With `--probe` (the JSON of `lookahead servers probe --json` on the same servers) it also prints, for each
method of a fixed γ, the ceiling: AR's own answers (their real step lengths) replayed through the method's
round rule with the probe's costs, drafts accepted at the acceptance the method measured (eval/replay.py),
and the engine's efficiency: the measured speedup over that ceiling. With `--traces DIR` every method's
answer to every problem is also drawn as an HTML timeline (`lookahead trace`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from lookahead_reasoning import LookaheadConfig, LookaheadReasoner
from lookahead_reasoning.cli.options import depth_options  # `--depth adaptive` as `lookahead run` takes it
from lookahead_reasoning.eval.replay import ceiling_of, costs_from_probe, rule_of, step_lengths
from lookahead_reasoning.eval.server_probe import ServerProbe
from lookahead_reasoning.eval.trace import write_trace
from lookahead_reasoning.runtime.servers.endpoints import load_endpoints


def method_config(method: str, max_tokens: int) -> LookaheadConfig:
    """`ENGINE-DEPTH[-FORK]`: sync-2, async-adaptive, sync-2-streamed (LookaheadConfig.fork; without it, batched)."""
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


def ceiling(rows: list[dict], method: str, probe: ServerProbe) -> tuple[float, float] | None:
    """(α, the replay's AR time over LR time) for `method` on AR's own steps (None: adaptive γ, or no AR texts)."""
    config = method_config(method, 512)
    if config.adaptive_depth or any("text" not in row["ar"] for row in rows):
        return None
    accepted = sum(row[method]["accepted"] for row in rows)
    judged = sum(row[method]["judged"] for row in rows)
    alpha = accepted / judged if judged else 0.0
    answers = [step_lengths(row["ar"]["text"], row["ar"]["tokens"], config.delimiter, config.max_step_tokens)
               for row in rows]
    costs = costs_from_probe(probe.model_dump())
    return alpha, ceiling_of(answers, costs, rule_of(config.engine, config.fork), config.depth, alpha)


def wall_interval(ar_seconds: list[float], lr_seconds: list[float]) -> tuple[float, float] | None:
    """95 % percentile-bootstrap interval of AR's total time over LR's, resampling problems (each problem's two
    times stay together); None under three problems."""
    if len(ar_seconds) < 3:
        return None
    import numpy as np
    import scipy.stats

    def ratio(ar, lr, axis=-1):
        return np.sum(ar, axis=axis) / np.sum(lr, axis=axis)

    found = scipy.stats.bootstrap((np.array(ar_seconds), np.array(lr_seconds)), ratio, paired=True, vectorized=True,
                                  n_resamples=2000, method="percentile", random_state=0).confidence_interval
    return float(found.low), float(found.high)


def compare(rows: list[dict], methods: list[str], probe: ServerProbe | None = None) -> list[str]:
    """Per method: AR's time over its time, summed over the problems (with the problems' bootstrap interval and
    the median problem's ratio), per token, the acceptance and the answers equal to AR's."""
    lines = []
    for method in methods:
        lr_s = sum(r[method]["seconds"] for r in rows)
        ar_s = sum(r["ar"]["seconds"] for r in rows)
        lr_tokens = sum(r[method]["tokens"] for r in rows)
        ar_tokens = sum(r["ar"]["tokens"] for r in rows)
        accepted = sum(r[method]["accepted"] for r in rows)
        judged = sum(r[method]["judged"] for r in rows)
        same = sum(r[method]["answer"] == r["ar"]["answer"] for r in rows)
        interval = wall_interval([r["ar"]["seconds"] for r in rows], [r[method]["seconds"] for r in rows])
        spread = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""
        median = statistics.median(r["ar"]["seconds"] / r[method]["seconds"] for r in rows)
        lines.append(f"{method}: {ar_s / lr_s:.3f}x AR wall{spread}, median problem {median:.3f}x, "
                     f"{(ar_s / ar_tokens) / (lr_s / lr_tokens):.3f}x per token "
                     f"({lr_s:.0f} s / {lr_tokens} tokens against {ar_s:.0f} s / {ar_tokens}); accepted {accepted}/"
                     f"{judged}; answers equal to AR's {same}/{len(rows)}")
        bound = ceiling(rows, method, probe) if probe is not None else None
        if bound is not None:
            alpha, total = bound
            lines.append(f"  ceiling {total:.3f}x (AR's steps replayed at α {alpha:.2f}, c {probe.c:.2f}, j {probe.j:.2f}); "
                         f"efficiency {ar_s / lr_s / total:.3f}")
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
    parser.add_argument("--traces", type=Path, help="a folder for one HTML timeline per problem and method")
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
                                        "answer": base.answer, "text": base.text}}
        for method, reasoner in reasoners.items():
            started = time.perf_counter()
            result = reasoner.run(question)
            judged = [r for r in result.round_log if r.positions]
            row[method] = {"seconds": time.perf_counter() - started, "tokens": result.stats.output_tokens,
                           "answer": result.answer, "accepted": sum(r.accepted for r in judged),
                           "judged": sum(r.positions for r in judged), "depths": [r.depth for r in result.round_log],
                           "steps": len(result.steps)}
            if args.traces:
                args.traces.mkdir(parents=True, exist_ok=True)
                speedup = row["ar"]["seconds"] / row[method]["seconds"]
                write_trace(result.round_log, args.traces / f"problem-{index}-{method}.html",
                            f"problem {index}, {method}", {"speedup": speedup})
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
