"""`lookahead servers probe`: the servers' costs measured directly, against simulated servers of known cost
(eval/simserver.py: decode_ms per token, batch_slope, prefill_ms per uncached token, request_ms per request)
and once against the real tiny CPU servers."""

import json
import math

import pytest
from cli_invoke import invoke, one_line_error

from lookahead_reasoning.eval.server_probe import probe_servers
from lookahead_reasoning.eval.simserver import SimConfig
from lookahead_reasoning.runtime.servers.endpoints import save_endpoints

HAS_REQUEST_MS = "request_ms" in SimConfig.model_fields
TARGET_MS, DRAFT_MS, JUDGE_MS, PREFILL_MS, REQUEST_MS = 4.0, 1.0, 10.0, 0.5, 30.0


def _probe(sims, **settings):
    return probe_servers(sims.endpoints(), **{"repeats": 3, **settings})


@pytest.fixture(scope="module")
def free(sim_servers):
    """A target that batches for free (batch_slope 0), with a fixed cost per request where the simulator has one."""
    fixed = {"request_ms": REQUEST_MS} if HAS_REQUEST_MS else {}
    with sim_servers(draft={"decode_ms": DRAFT_MS, "prefill_ms": PREFILL_MS},
                     target={"decode_ms": TARGET_MS, "batch_slope": 0.0, "prefill_ms": PREFILL_MS, **fixed},
                     judge={"decode_ms": JUDGE_MS}) as sims:
        yield _probe(sims, widths=[2, 4, 8], tokens=40), sims


@pytest.fixture(scope="module")
def linear(sim_servers):
    """A target on which every request in flight slows the others as much as itself (batch_slope 1)."""
    with sim_servers(draft={"decode_ms": DRAFT_MS}, target={"decode_ms": TARGET_MS, "batch_slope": 1.0},
                     judge={"decode_ms": JUDGE_MS}) as sims:
        yield _probe(sims, widths=[2, 3, 5], tokens=24, short_tokens=6)


def test_a_batch_that_costs_one_request_measures_b_1(free):
    result, _ = free
    assert [w.width for w in result.fork] == [2, 4, 8]
    for w in result.fork:
        assert w.b == pytest.approx(1.0, abs=0.1), w


def test_a_batch_that_costs_n_requests_measures_b_n(linear):
    for w in linear.fork:
        assert w.b == pytest.approx(w.width, rel=0.1), w


def test_c_is_the_ratio_of_the_decode_times(free, linear):
    result, _ = free
    assert result.target.per_token_s == pytest.approx(TARGET_MS / 1000, rel=0.1)
    assert result.draft.per_token_s == pytest.approx(DRAFT_MS / 1000, rel=0.15)
    assert result.c_per_token == pytest.approx(DRAFT_MS / TARGET_MS, rel=0.15)
    # without fixed costs the whole requests' ratio is the same
    assert linear.c == pytest.approx(DRAFT_MS / TARGET_MS, rel=0.15)


@pytest.mark.skipif(not HAS_REQUEST_MS, reason="this simulator has no request_ms")
def test_the_fit_finds_the_fixed_cost(free):
    result, _ = free
    # o is the simulated request_ms plus HTTP and the client's time, a few ms here
    assert REQUEST_MS / 1000 <= result.target.fixed_s + 0.002
    assert result.target.fixed_s < (REQUEST_MS + 10) / 1000
    assert result.draft.fixed_s < 0.01  # the draft has no request_ms


def test_the_prefill_rate_is_the_simulated_one(free):
    result, _ = free
    assert result.prefill_prompt_tokens == pytest.approx(300, rel=0.1)  # one word, one simulated token
    assert result.prefill_uncached_s_per_token == pytest.approx(PREFILL_MS / 1000, rel=0.15)
    assert abs(result.prefill_cached_s_per_token) < PREFILL_MS / 1000 / 10  # the radix cache's prompt is free


def test_the_judge_call_is_the_constrained_judge_program(free):
    result, sims = free
    assert "regex" in sims.judge.engine.state.last_sampling  # the judge program's yes/no constraint
    # one answer token and the EOS: two ticks of the judge's decode (its prompt's prefill is free here)
    assert result.judge_s == pytest.approx(2 * JUDGE_MS / 1000, abs=0.006)
    assert result.judge_target_tokens == pytest.approx(result.judge_s / result.target.per_token_s)
    assert result.j == pytest.approx(result.judge_s / result.target_single_s)


def test_servers_of_their_own_overlap_for_free(free):
    result, _ = free
    assert result.target_beside_draft == pytest.approx(1.0, abs=0.15)
    assert result.draft_beside_target == pytest.approx(1.0, abs=0.3)  # a short request: HTTP weighs more
    assert result.together_over_serial == pytest.approx(1 / (1 + result.c), rel=0.15)  # the target alone's time


def test_a_draft_that_shares_the_targets_capacity_shows_it_side_by_side(sim_servers):
    """The draft on the target's own linear server: sent together, the two requests share one decode loop, as
    two servers share a CPU's cores."""
    with sim_servers(target={"decode_ms": TARGET_MS, "batch_slope": 1.0}, judge={"decode_ms": JUDGE_MS}) as sims:
        endpoints = sims.endpoints()
        endpoints.draft = endpoints.target
        result = probe_servers(endpoints, widths=[2], tokens=24, short_tokens=6, repeats=3)  # a median past one stall
    assert result.c == pytest.approx(1.0, rel=0.15)
    assert result.target_beside_draft == pytest.approx(2.0, rel=0.15)
    assert result.draft_beside_target == pytest.approx(2.0, rel=0.15)
    assert result.together_over_serial == pytest.approx(1.0, rel=0.15)  # overlapping gains nothing


def test_the_cli_prints_one_json_object(sim_servers, capsys):
    with sim_servers(draft={"decode_ms": DRAFT_MS}, target={"decode_ms": TARGET_MS, "batch_slope": 1.0},
                     judge={"decode_ms": JUDGE_MS}) as sims:
        endpoints = sims.endpoints()
        outcome = invoke(capsys, "servers", "probe", "--draft-url", endpoints.draft.url, "--target-url",
                         endpoints.target.url, "--judge-url", endpoints.judge.url, "--chat-template", "chatml",
                         "--widths", "3", "--tokens", "16", "--short-tokens", "4", "--repeats", "3",
                         "--prompt-tokens", "50", "--json")
    assert outcome.returncode == 0, outcome.stderr
    result = json.loads(outcome.stdout)
    assert [w["width"] for w in result["fork"]] == [3]
    assert result["fork"][0]["b"] == pytest.approx(3, rel=0.15)
    assert result["tokens"] == 16 and result["repeats"] == 3
    assert result["prefill_prompt_tokens"] == pytest.approx(50, rel=0.2)
    assert result["target_url"] == endpoints.target.url


def test_bad_input_is_one_line(capsys, tmp_path, sim_servers):
    one_line_error(invoke(capsys, "servers", "probe", "--endpoints", str(tmp_path / "none.json")), "does not exist")
    one_line_error(invoke(capsys, "servers", "probe", "--target-url", "http://127.0.0.1:9"), "--draft-url")
    one_line_error(invoke(capsys, "servers", "probe", "--draft-url", "http://127.0.0.1:9", "--target-url",
                          "http://127.0.0.1:9"), "cannot reach")
    one_line_error(invoke(capsys, "servers", "probe", "--draft-url", "http://127.0.0.1:9", "--target-url",
                          "http://127.0.0.1:9", "--widths", "1,2"), "--widths")
    one_line_error(invoke(capsys, "servers", "probe", "--draft-url", "http://127.0.0.1:9", "--target-url",
                          "http://127.0.0.1:9", "--tokens", "8"), "fewer tokens")
    with sim_servers() as sims:
        sims.judge.engine.state.fault = "fail"
        endpoints = sims.endpoints()
        one_line_error(invoke(capsys, "servers", "probe", "--draft-url", endpoints.draft.url, "--target-url",
                              endpoints.target.url, "--judge-url", endpoints.judge.url, "--repeats", "1"),
                       "judge server")
        sims.heal()


@pytest.mark.server
def test_the_probe_measures_the_real_tiny_servers(tiny_endpoints, tmp_path, capsys):
    path = tmp_path / "endpoints.json"
    save_endpoints(tiny_endpoints, path)
    outcome = invoke(capsys, "servers", "probe", "--endpoints", str(path), "--widths", "2,4", "--tokens", "32",
                     "--repeats", "2", "--prompt-tokens", "200", "--json")
    assert outcome.returncode == 0, outcome.stderr
    result = json.loads(outcome.stdout)
    assert [w["width"] for w in result["fork"]] == [2, 4]
    positive = [w[key] for w in result["fork"] for key in ("single_s", "batch_s", "b")] + [
        result["target"]["per_token_s"], result["draft"]["per_token_s"], result["target_single_s"],
        result["draft_single_s"], result["c"], result["c_per_token"], result["judge_s"], result["j"],
        result["judge_target_tokens"], result["prefill_prompt_tokens"], result["target_beside_draft"],
        result["draft_beside_target"], result["together_over_serial"],
    ]
    assert all(math.isfinite(v) and v > 0 for v in positive), result
    finite = [result["target"]["fixed_s"], result["draft"]["fixed_s"], result["prefill_uncached_s_per_token"],
              result["prefill_cached_s_per_token"]]
    assert all(math.isfinite(v) for v in finite), result
