"""Eval data integrity: results.jsonl as the reader finds it after crashes and edits, eval.json as a pin of the
settings and of the models the servers serve."""

import json
import logging

import pytest
from cli_invoke import invoke
from fastapi import FastAPI

from lookahead_reasoning.eval.datasets import load_problems
from lookahead_reasoning.eval.records import EvalRecord, ResultStore, pin_settings
from lookahead_reasoning.eval.runner import parse_methods, run_eval
from lookahead_reasoning.eval.served import served_models
from lookahead_reasoning.eval.simserver import SimConfig, SimServerThread
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.servers.endpoints import Endpoints
from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.runtime.servers.processes import UvicornThread, free_port

SIM_MODELS = {"draft": "lookahead-sim-draft", "target": "lookahead-sim-target", "judge": "lookahead-sim-judge"}


def record(pid: str, method: str = "ar", text: str = "some text") -> EvalRecord:
    return EvalRecord(problem_id=pid, method=method, sample=0, correct=None, wall_s=1.0, prompt_tokens=3,
                      output_tokens=5, finish="eos", text=text)


def line(pid: str, method: str = "ar") -> bytes:
    return record(pid, method).model_dump_json().encode()


def model_info_server(model_path: str | None, route: str = "/model_info") -> UvicornThread:
    """A server that only answers its model info: what a rerun meets before it generates anything."""
    app = FastAPI()

    @app.get(route)
    async def info():
        return {"model_path": model_path} if model_path else {"is_generation": True}

    return UvicornThread(app)


@pytest.fixture(scope="module")
def sims(sim_servers):
    with sim_servers(
        SimConfig(role="draft", decode_ms=1.0, steps=3, step_tokens=3),
        SimConfig(role="target", decode_ms=1.0, steps=3, step_tokens=3),
        SimConfig(role="judge", decode_ms=1.0, alpha=0.7),
    ) as servers:
        yield servers


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "gsm.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                            for i in range(2)))
    return path


def one_line_error(outcome, fragment: str) -> None:
    """The command failed with one `error: ...` line naming `fragment` (after the progress bar's last frame, if any)."""
    assert outcome.returncode == 1 and outcome.stdout == ""
    lines = [l for l in outcome.stderr.splitlines() if l.strip() and "━" not in l]
    assert len(lines) == 1, outcome.stderr
    assert lines[0].startswith("error:") and fragment in lines[0], lines[0]


def eval_args(data, out, draft, target, judge) -> list[str]:
    return ["eval", "--dataset", "gsm8k", "--data", str(data), "--methods", "ar", "--threshold", "0.5",
            "--max-tokens", "60", "--out", str(out), "--draft-url", draft, "--target-url", target, "--judge-url", judge,
            "--chat-template", "chatml"]


# --- the served models are pinned ----------------------------------------------------------------------------


def test_a_resume_against_another_target_model_is_refused(sims, data, tmp_path, capsys):
    out = tmp_path / "out"
    urls = sims.draft.url, sims.target.url, sims.judge.url
    first = invoke(capsys, *eval_args(data, out, *urls))
    assert first.returncode == 0, first.stderr
    assert json.loads((out / "eval.json").read_text())["models"] == SIM_MODELS
    results = (out / "results.jsonl").read_bytes()
    assert len(results.splitlines()) == 2
    with model_info_server("Qwen/Other-32B") as other:
        refused = invoke(capsys, *eval_args(data, out, sims.draft.url, other.url, sims.judge.url))
    one_line_error(refused, "other models (target: lookahead-sim-target then, Qwen/Other-32B now)")
    assert (out / "results.jsonl").read_bytes() == results  # nothing mixed in
    assert json.loads((out / "eval.json").read_text())["models"] == SIM_MODELS
    again = invoke(capsys, *eval_args(data, out, *urls))  # the same models: resumes, nothing left to run
    assert again.returncode == 0, again.stderr
    assert (out / "results.jsonl").read_bytes() == results


def earlier_run(data, out, urls, capsys, edit_pin) -> bytes:
    """A finished run's folder whose eval.json `edit_pin` changed and whose second result is gone; its first line."""
    assert invoke(capsys, *eval_args(data, out, *urls)).returncode == 0
    first = (out / "results.jsonl").read_bytes().splitlines()[0]
    (out / "results.jsonl").write_bytes(first + b"\n")
    pinned = json.loads((out / "eval.json").read_text())
    edit_pin(pinned)
    (out / "eval.json").write_text(json.dumps(pinned))
    return first


def test_force_reuse_adopts_results_of_other_models(sims, data, tmp_path, capsys, caplog):
    out = tmp_path / "out"
    urls = sims.draft.url, sims.target.url, sims.judge.url
    first = earlier_run(data, out, urls, capsys, lambda pin: pin["models"].update(target="Qwen/Other-32B"))
    one_line_error(invoke(capsys, *eval_args(data, out, *urls)), "or give --force-reuse")
    with caplog.at_level(logging.WARNING):
        forced = invoke(capsys, *eval_args(data, out, *urls), "--force-reuse")
    assert forced.returncode == 0, forced.stderr
    assert any("target: Qwen/Other-32B then, lookahead-sim-target now" in r.getMessage() and "--force-reuse" in
               r.getMessage() for r in caplog.records)
    assert json.loads((out / "eval.json").read_text())["models"] == SIM_MODELS
    lines = (out / "results.jsonl").read_bytes().splitlines()
    assert lines[0] == first and len(lines) == 2  # the first result is kept, only the second ran


def test_an_eval_json_that_names_no_models_is_refused_unless_forced(sims, data, tmp_path, capsys):
    out = tmp_path / "out"
    urls = sims.draft.url, sims.target.url, sims.judge.url
    first = earlier_run(data, out, urls, capsys, lambda pin: pin.pop("models"))  # a header from before models were pinned
    header = (out / "eval.json").read_bytes()
    refused = invoke(capsys, *eval_args(data, out, *urls))
    one_line_error(refused, "eval.json names no models, so the models that made the results in")
    assert "--force-reuse" in refused.stderr
    assert (out / "eval.json").read_bytes() == header  # the new run's models are not taken
    assert (out / "results.jsonl").read_bytes() == first + b"\n"
    forced = invoke(capsys, *eval_args(data, out, *urls), "--force-reuse")
    assert forced.returncode == 0, forced.stderr
    assert json.loads((out / "eval.json").read_text())["models"] == SIM_MODELS
    lines = (out / "results.jsonl").read_bytes().splitlines()
    assert lines[0] == first and len(lines) == 2


def test_results_without_their_eval_json_are_not_adopted(sims, data, tmp_path, capsys):
    out = tmp_path / "out"
    urls = sims.draft.url, sims.target.url, sims.judge.url
    out.mkdir()  # results whose eval.json was lost or never beside them: of which models, nothing says
    (out / "results.jsonl").write_bytes(line("p0") + b"\n" + line("p1") + b"\n")
    results = (out / "results.jsonl").read_bytes()
    refused = invoke(capsys, *eval_args(data, out, *urls))
    one_line_error(refused, "results.jsonl has results but no eval.json beside it")
    assert "--force-reuse" in refused.stderr
    assert (out / "results.jsonl").read_bytes() == results and not (out / "eval.json").exists()
    forced = invoke(capsys, *eval_args(data, out, *urls), "--force-reuse")  # adopted: nothing left to run
    assert forced.returncode == 0, forced.stderr
    assert (out / "results.jsonl").read_bytes() == results
    assert json.loads((out / "eval.json").read_text())["models"] == SIM_MODELS
    (out / "eval.json").unlink()
    (out / "results.jsonl").write_text("\n")  # a file with no results in it pins nothing: the run starts afresh
    started = invoke(capsys, *eval_args(data, out, *urls))
    assert started.returncode == 0, started.stderr
    assert json.loads((out / "eval.json").read_text())["models"] == SIM_MODELS
    assert len(ResultStore(out / "results.jsonl").load()) == 2


def test_sweep_pins_the_models_too(sims, data, tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["sweep", "--dataset", "gsm8k", "--data", str(data), "--limit", "1", "--width", "1", "--depth", "1",
            "--threshold", "0.5", "--max-tokens", "60", "--out", str(out), "--chat-template", "chatml"]
    first = invoke(capsys, *args, "--draft-url", sims.draft.url, "--target-url", sims.target.url,
                   "--judge-url", sims.judge.url)
    assert first.returncode == 0, first.stderr
    assert json.loads((out / "eval.json").read_text())["models"] == SIM_MODELS
    with model_info_server("a/new-draft") as other:
        refused = invoke(capsys, *args, "--draft-url", other.url, "--target-url", sims.target.url,
                         "--judge-url", sims.judge.url)
    one_line_error(refused, "draft: lookahead-sim-draft then, a/new-draft now")
    with model_info_server("a/new-draft") as other:
        forced = invoke(capsys, *args, "--draft-url", other.url, "--target-url", sims.target.url,
                        "--judge-url", sims.judge.url, "--force-reuse")
    assert forced.returncode == 0, forced.stderr  # the one cell's result is there: nothing runs on the new draft
    assert json.loads((out / "eval.json").read_text())["models"] == {**SIM_MODELS, "draft": "a/new-draft"}


def test_a_server_that_does_not_answer_is_a_one_line_error(sims, data, tmp_path, capsys):
    dead = f"http://127.0.0.1:{free_port()}"
    outcome = invoke(capsys, *eval_args(data, tmp_path / "out", sims.draft.url, dead, sims.judge.url))
    one_line_error(outcome, f"cannot reach the target server at {dead}")
    with SimServerThread(SimConfig(role="judge")) as stalled:
        stalled.engine.state.fault = "stall"
        endpoints = Endpoints.from_urls(sims.draft.url, sims.target.url, stalled.url)
        with pytest.raises(LookaheadError, match=r"the judge server at .* did not answer /model_info within 0.5 s"):
            served_models(endpoints, timeout_s=0.5)


def test_model_info_of_older_servers_and_of_servers_without_a_model_path():
    with model_info_server("old/model", route="/get_model_info") as old, model_info_server(None) as vague:
        models = served_models(Endpoints.from_urls(old.url, old.url))  # the judge shares the target's server
        assert models == {"draft": "old/model", "target": "old/model", "judge": "old/model"}
        with pytest.raises(LookaheadError, match=r"the draft server at .* gave no model_path"):
            served_models(Endpoints.from_urls(vague.url, old.url))


def test_the_models_pin_role_by_role(tmp_path):
    path = tmp_path / "eval.json"
    settings = {"dataset": "gsm8k", "methods": ["ar"]}
    pin_settings(path, {**settings})  # a pin from before models were pinned
    with pytest.raises(LookaheadError, match=r"eval.json names no models, .* or give --force-reuse"):
        pin_settings(path, {**settings, "models": SIM_MODELS})  # does not silently take the models given now
    assert "models" not in json.loads(path.read_text())
    pin_settings(path, {**settings, "models": SIM_MODELS}, force_reuse=True)
    assert json.loads(path.read_text())["models"] == SIM_MODELS
    pin_settings(path, {**settings, "methods": ["lr"]})  # a caller that names no models keeps the pinned ones
    pinned = json.loads(path.read_text())
    assert pinned["models"] == SIM_MODELS and pinned["methods"] == ["ar", "lr"]
    with pytest.raises(LookaheadError) as refused:
        pin_settings(path, {**settings, "models": {**SIM_MODELS, "judge": "big-judge", "draft": "small"}})
    message = str(refused.value)
    assert "\n" not in message
    assert "draft: lookahead-sim-draft then, small now, judge: lookahead-sim-judge then, big-judge now" in message
    assert "target" not in message


# --- eval.json that is not a pin ------------------------------------------------------------------------------


@pytest.mark.parametrize("content, problem", [
    (b'{"dataset": "gsm8k", "met', "is not valid JSON"),
    (b'\xff\xfe{}', "is not valid JSON"),
    (b'["gsm8k"]', "malformed (not a JSON object)"),
    (b'{"dataset": "gsm8k", "methods": "ar"}', "malformed (methods is not a list of names)"),
    (b'{"dataset": "gsm8k", "methods": [1]}', "malformed (methods is not a list of names)"),
    (b'{"dataset": "gsm8k", "methods": [], "models": ["x"]}', "malformed (models is not an object"),
    (b'{"dataset": "gsm8k", "methods": [], "models": {"target": 3}}', "malformed (models is not an object"),
])
def test_a_malformed_pin_is_a_one_line_error(tmp_path, content, problem):
    path = tmp_path / "eval.json"
    path.write_bytes(content)
    with pytest.raises(LookaheadError) as refused:
        pin_settings(path, {"dataset": "gsm8k", "methods": ["ar"]})
    assert problem in str(refused.value) and str(path) in str(refused.value) and "\n" not in str(refused.value)
    assert path.read_bytes() == content


def test_the_cli_reports_a_malformed_pin_in_one_line(sims, data, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "eval.json").write_text("[1, 2]")
    outcome = invoke(capsys, *eval_args(data, out, sims.draft.url, sims.target.url, sims.judge.url))
    one_line_error(outcome, "eval.json is malformed (not a JSON object)")


# --- results.jsonl as a crash or an editor leaves it ----------------------------------------------------------


def test_a_whole_last_line_without_its_newline_is_kept_and_the_next_record_gets_a_line_of_its_own(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(line("p0") + b"\n" + line("p1"))  # e.g. saved by an editor that drops the final newline
    store = ResultStore(path)
    assert set(store.load()) == {("p0", "ar", 0), ("p1", "ar", 0)}
    assert path.read_bytes().endswith(line("p1"))  # not cut off
    store.append(record("p2"))
    assert path.read_bytes().splitlines() == [line("p0"), line("p1"), line("p2")]
    assert set(store.load()) == {("p0", "ar", 0), ("p1", "ar", 0), ("p2", "ar", 0)}


def test_a_torn_last_line_is_dropped_and_redone(tmp_path, caplog):
    path = tmp_path / "results.jsonl"
    path.write_bytes(line("p0") + b"\n" + line("p1")[:-25])
    store = ResultStore(path)
    with caplog.at_level(logging.WARNING):
        assert set(store.load()) == {("p0", "ar", 0)}
    assert path.read_bytes() == line("p0") + b"\n"
    store.append(record("p1"))
    assert path.read_bytes() == line("p0") + b"\n" + line("p1") + b"\n"
    [warned] = [r.getMessage() for r in caplog.records]
    assert warned.startswith(f"{path}:2: not an eval result (Invalid JSON") and "cut off, its result runs again" in warned


def test_a_torn_last_line_cut_inside_a_character_is_dropped(tmp_path):
    path = tmp_path / "results.jsonl"
    whole = record("p1", text="π is about 3.14").model_dump_json().encode()
    cut = whole[: whole.index("π".encode()) + 1]  # half of π's two bytes
    path.write_bytes(line("p0") + b"\n" + cut)
    assert set(ResultStore(path).load()) == {("p0", "ar", 0)}
    assert path.read_bytes() == line("p0") + b"\n"


@pytest.mark.parametrize("bad, problem", [
    (b'{"problem_id": "p1", "method": "ar", "sam', "not an eval result (Invalid JSON"),
    (line("p1").replace(b"some", b"s\xffme"), "not UTF-8: byte 0xff at column"),
    (b'{"not": "a record"}', "not an eval result (problem_id: Field required)"),
])
def test_a_bad_line_in_the_middle_is_skipped_with_a_warning_naming_file_and_line(tmp_path, caplog, bad, problem):
    path = tmp_path / "results.jsonl"
    content = line("p0") + b"\n" + bad + b"\n" + line("p2") + b"\n"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        records = ResultStore(path).load()
    assert set(records) == {("p0", "ar", 0), ("p2", "ar", 0)}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith(f"{path}:2: ") and problem in warned[0], warned
    assert warned[0].endswith("skipped")
    assert path.read_bytes() == content  # the reader changes nothing before the last line


def test_a_record_appended_after_a_torn_line_is_read(tmp_path, caplog):
    path = tmp_path / "results.jsonl"
    torn = line("p1")[:-40]  # a crash while writing p1; the resumed run appended p2 right after it
    content = line("p0") + b"\n" + torn + line("p2") + b"\n" + line("p3") + b"\n"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        records = ResultStore(path).load()
    assert set(records) == {("p0", "ar", 0), ("p2", "ar", 0), ("p3", "ar", 0)}
    assert records[("p2", "ar", 0)] == record("p2")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith(f"{path}:2: columns 1-{len(torn)}: not an eval result ("), warned
    assert warned[0].endswith("skipped")
    assert path.read_bytes() == content


@pytest.mark.parametrize("pieces, kept", [
    ([line("p1")[:-40], line("p1")[:30], line("p2")], {"p2"}),  # two crashes in a row
    ([line("p1")[:-40], line("p2"), line("p3")], {"p2", "p3"}),  # a whole record with no newline after it
    ([line("p2"), line("p1")[:-40], line("p3")], {"p2", "p3"}),
    ([line("p2"), b"  ", line("p3")], {"p2", "p3"}),
    ([record("p1", text="π").model_dump_json().encode()[:-4], line("p2")], {"p2"}),  # cut inside a character
    ([line("p1").replace(b"some", b'{so\\"me')[:-4], line("p2")], {"p2"}),  # a brace, an escaped quote
    ([record("p1").model_copy(update={"grade_detail": "{"}).model_dump_json().encode()[:-20], line("p2")],
     {"p2"}),  # `{"` where a string ends: not where a record starts
])
def test_every_whole_record_on_a_damaged_line_is_read(tmp_path, pieces, kept):
    path = tmp_path / "results.jsonl"
    path.write_bytes(line("p0") + b"\n" + b"".join(pieces) + b"\n")
    assert set(ResultStore(path).load()) == {(pid, "ar", 0) for pid in {"p0", *kept}}


def test_a_record_appended_after_a_torn_line_at_the_end_is_kept(tmp_path, caplog):
    path = tmp_path / "results.jsonl"
    torn = line("p1")[:-40]
    path.write_bytes(line("p0") + b"\n" + torn + line("p2"))
    store = ResultStore(path)
    with caplog.at_level(logging.WARNING):
        assert set(store.load()) == {("p0", "ar", 0), ("p2", "ar", 0)}
    assert path.read_bytes().endswith(line("p2"))  # not cut off with the torn record before it
    [warned] = [r.getMessage() for r in caplog.records]
    assert warned.startswith(f"{path}:2: columns 1-{len(torn)}: ") and warned.endswith("skipped")
    store.append(record("p3"))
    assert set(store.load()) == {("p0", "ar", 0), ("p2", "ar", 0), ("p3", "ar", 0)}


def test_a_torn_record_after_a_whole_one_at_the_end_is_cut_off(tmp_path, caplog):
    path = tmp_path / "results.jsonl"
    path.write_bytes(line("p0") + b"\n" + line("p1") + line("p2")[:-40])
    with caplog.at_level(logging.WARNING):
        assert set(ResultStore(path).load()) == {("p0", "ar", 0), ("p1", "ar", 0)}
    assert path.read_bytes() == line("p0") + b"\n" + line("p1")
    [warned] = [r.getMessage() for r in caplog.records]
    assert warned.startswith(f"{path}:2: columns {len(line('p1')) + 1}-") and warned.endswith("its result runs again")


def test_a_file_without_a_single_result_is_refused(tmp_path):
    path = tmp_path / "results.jsonl"
    content = b"\n" + b'{"not": "a record"}\n' + b"\xff\xfe\n" + b'{"half": '
    path.write_bytes(content)
    with pytest.raises(LookaheadError, match=r"results.jsonl:2: not an eval result \(problem_id: Field required\); "
                                             r"move the file away or use another --out$"):
        ResultStore(path).load()
    assert path.read_bytes() == content  # not someone else's file cut short


def test_text_with_unicode_line_separators_reads_back(tmp_path):
    path = tmp_path / "results.jsonl"
    store = ResultStore(path)
    odd = record("p0", text="one\u2028two\u2029three\x85four\x1cfive\rsix")
    store.append(odd)
    store.append(record("p1"))
    assert store.load()[("p0", "ar", 0)].text == odd.text
    assert len(store.load()) == 2


def test_a_rerun_redoes_a_result_whose_line_was_damaged(sims, tmp_path, caplog):
    data = tmp_path / "gsm.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "question": f"q{i}", "answer": "1"}) + "\n" for i in range(2)))
    problems = load_problems("gsm8k", data)
    methods = parse_methods("ar", LookaheadConfig(max_tokens=60, verifier_threshold=0.5, request_timeout_s=10))
    out = tmp_path / "out"
    run_eval(problems, methods, sims.endpoints(), out, {"dataset": "gsm8k"})
    results = out / "results.jsonl"
    first, second = results.read_bytes().splitlines()
    results.write_bytes(first[:30] + b"\xff" + first[31:] + b"\n" + second + b"\n")  # a bad byte in line 1
    with caplog.at_level(logging.WARNING):
        records = run_eval(problems, methods, sims.endpoints(), out, {"dataset": "gsm8k"})
    assert sorted(r.problem_id for r in records) == ["p0", "p1"]
    assert any(r.getMessage().startswith(f"{results}:1: not an eval result (not UTF-8") for r in caplog.records)
    lines = results.read_bytes().splitlines()
    assert len(lines) == 3 and EvalRecord.model_validate_json(lines[2]).problem_id == "p0"
