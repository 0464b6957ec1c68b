"""A real client, unchanged: EleutherAI's lm-evaluation-harness (`local-chat-completions`) against
`lookahead serve` in front of real CPU SGLang servers running the scripted tiny models.

Needs the `client` extra (pip install -e '.[client]'). Offline: the task is a YAML file over a
local JSONL file, requests go out as text (`tokenized_requests=False`, no tokenizer to download),
and every proxy variable points at a closed port, so any request beyond loopback would fail.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from test_serve import Frontend

from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.serve import ServeSettings

pytestmark = [
    pytest.mark.server,
    pytest.mark.client,
    pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None,
                       reason="lm-eval is not installed (pip install -e '.[client]')"),
]

QUESTIONS = [
    {"question": "What is two and three?", "answer": "5"},
    {"question": "Add two and three.", "answer": "5"},
]
TASK = """\
task: lookahead_two_questions
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\\\boxed"]
  max_gen_toks: 64
  temperature: 0
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens


def test_lm_eval_harness_gets_an_answer_for_every_sample(tiny_endpoints, tmp_path):
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "lookahead_two_questions.yaml").write_text(TASK.format(data=data))
    out = tmp_path / "out"
    env = {
        **os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "HTTP_PROXY": CLOSED, "HTTPS_PROXY": CLOSED, "http_proxy": CLOSED, "https_proxy": CLOSED,
        "ALL_PROXY": CLOSED, "all_proxy": CLOSED, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    }
    config = LookaheadConfig(depth=2, max_tokens=64)
    with Frontend(tiny_endpoints, ServeSettings(max_tokens_cap=256), config) as frontend:
        model_args = (f"base_url={frontend.url}/v1/chat/completions,model=lookahead,num_concurrent=1,"
                      "max_retries=1,tokenized_requests=False")
        run = subprocess.run(
            [sys.executable, "-m", "lm_eval", "--model", "local-chat-completions", "--model_args", model_args,
             "--apply_chat_template", "--tasks", "lookahead_two_questions", "--include_path", str(tasks),
             "--limit", "2", "--log_samples", "--output_path", str(out)],
            capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path,
        )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    print(run.stdout)
    [samples_file] = out.rglob("samples_lookahead_two_questions_*.jsonl")
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    assert sorted(s["doc_id"] for s in samples) == [0, 1]
    for sample in samples:
        [[answer]] = sample["resps"]
        assert answer.strip(), sample
        # the tiny target writes "We add two and three\n\nHence \boxed{5}": the stop string cut it
        assert answer.startswith("We add two and three") and "\\boxed" not in answer, answer
