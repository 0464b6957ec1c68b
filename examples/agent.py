"""An SGLang agent program that reasons with lookahead reasoning, picks a tool, and checks itself.

    python examples/agent.py --endpoints ~/.cache/lookahead-reasoning/endpoints.json \
        --question "A train travels 60 km in 45 minutes. What is its speed in km/h?"

1. Plan and solve: `lookahead_turn` appends the question and an answer written by
   lookahead reasoning (draft, target and judge servers from the endpoints file).
2. Act: `select` picks which tool would best verify the answer.
3. Check: a second pass asks the target whether the answer is correct (yes/no).

It prints one JSON object: the answer, the tool, the verdict and the LR statistics.
The parent program runs on the target's server, the same model the reasoner's target uses.
That server may be SGLang's router in front of replicas (`lookahead launch --target-replicas 2`):
`select` then scores each choice with its own request (the router refuses SGLang's batched one).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import sglang as sgl

from lookahead_reasoning import LookaheadConfig, LookaheadReasoner
from lookahead_reasoning.programs import lookahead_turn
from lookahead_reasoning.runtime.answers import last_boxed
from lookahead_reasoning.runtime.servers.endpoints import default_endpoints_path, load_endpoints

TOOLS = ["calculator", "web search", "none"]


@sgl.function
def solve_with_tools(s, question, reasoner):
    s += sgl.system("You are a careful assistant. You can use a calculator or a web search to verify answers.")
    lookahead_turn(s, question, reasoner)
    s += sgl.user(f"Which tool would best verify this answer? Choose one of: {', '.join(TOOLS)}.")
    s += sgl.assistant(sgl.select("tool", choices=TOOLS))
    s += sgl.user("Read your reasoning once more. Is the final answer correct? Answer yes or no.")
    s += sgl.assistant(sgl.select("verdict", choices=["yes", "no"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=Path, default=default_endpoints_path())
    parser.add_argument("--question", default="A train travels 60 km in 45 minutes. What is its speed in km/h?")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()

    reasoner = LookaheadReasoner(load_endpoints(args.endpoints), LookaheadConfig(depth=args.depth, max_tokens=args.max_tokens))
    state = solve_with_tools.run(
        question=args.question, reasoner=reasoner, backend=reasoner.connection.backends["target"]
    )
    result = state["lookahead"]
    print(json.dumps({
        "answer": last_boxed(state["reasoning"]),
        "reasoning": state["reasoning"],
        "tool": state["tool"],
        "verdict": state["verdict"],
        # the server's score of each choice: `select` picks the best
        "tool_scores": state.get_meta_info("tool")["normalized_prompt_logprobs"],
        "verdict_scores": state.get_meta_info("verdict")["normalized_prompt_logprobs"],
        "stats": {"rounds": result.stats.rounds, "acceptance_rate": result.stats.acceptance_rate,
                  "wall_time_s": result.stats.wall_time_s},
    }))


if __name__ == "__main__":
    main()
