"""`lookahead serve` and the agent example in front of real CPU SGLang servers (tiny models)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_serve import Frontend

from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.servers.endpoints import save_endpoints
from lookahead_reasoning.runtime.serve import ServeSettings

pytestmark = pytest.mark.server
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def frontend(tiny_endpoints):
    config = LookaheadConfig(depth=2, max_tokens=64)
    with Frontend(tiny_endpoints, ServeSettings(max_tokens_cap=256), config) as f:
        yield f


def test_official_openai_client_non_streaming_and_streaming(frontend):
    from openai import OpenAI

    client = OpenAI(base_url=frontend.url + "/v1", api_key="unused")
    messages = [{"role": "user", "content": "What is two and three?"}]
    reply = client.chat.completions.create(model="lookahead", messages=messages, max_tokens=64, temperature=0)
    text = reply.choices[0].message.content
    assert text.startswith("We add two and three\n\n") and reply.choices[0].finish_reason == "stop"
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    assert reply.model_extra["lookahead"]["rounds"] >= 1

    stream = client.chat.completions.create(model="lookahead", messages=messages, max_tokens=64, stream=True)
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    assert "".join(pieces) == text
    assert sum(1 for p in pieces if p) == 2  # the two kept steps, each as soon as it was kept

    completion = client.completions.create(model="target", prompt="<|im_start|>assistant\n", max_tokens=32)
    assert completion.choices[0].text.startswith("We add two and three")


def test_prompt_over_the_context_limit_is_a_400(frontend):
    import requests

    long = "two and three " * 3000  # far beyond the tiny model's 4096-token context
    res = requests.post(frontend.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": long}]})
    assert res.status_code == 400, res.text
    assert res.json()["error"]["type"] == "invalid_request_error"


def test_agent_example_runs_against_real_servers(tiny_endpoints, tmp_path):
    endpoints = tmp_path / "endpoints.json"
    save_endpoints(tiny_endpoints, endpoints)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "agent.py"), "--endpoints", str(endpoints), "--question",
         "What is two and three?", "--max-tokens", "64"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["reasoning"].startswith("We add two and three")
    # the tiny judge gives every yes/no token the same logit, so P(yes) stays below the default
    # threshold 0.8: tiny-draft's differing second step (boxed 6) is rejected, the target's kept
    assert out["answer"] == "5"
    tools, verdicts = ("calculator", "web search", "none"), ("yes", "no")
    assert out["tool"] == tools[out["tool_scores"].index(max(out["tool_scores"]))]
    assert out["verdict"] == verdicts[out["verdict_scores"].index(max(out["verdict_scores"]))]
    assert out["stats"]["rounds"] >= 1
