"""`lookahead trace` / `run --trace`: a run's rounds as one self-contained HTML page (eval/trace.py)."""

import json
from html.parser import HTMLParser

import pytest
from scripted import ScriptedJudge
from test_streamed_fork import ACCEPT, DRAFT, TARGET, HeldAfterRejection

from lookahead_reasoning.cli.display import run_json
from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.eval.trace import load_rounds, render, summary_lines
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.engine import SyncEngine
from lookahead_reasoning.verifiers import FastPathVerifier

VOID = {"meta", "br", "img", "hr", "input", "link"}


class Page(HTMLParser):
    """The page as a real parser reads it: tags must nest; what it holds is collected."""

    def __init__(self):
        super().__init__()
        self.open: list[str] = []
        self.sections = 0
        self.bars: list[dict] = []  # <rect> with its <title>
        self.rows: list[str] = []  # <tr class> of the judged-pairs tables
        self.lines = 0
        self.external = []  # anything that would need a server or the network
        self._rect: dict | None = None
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag not in VOID and tag not in ("rect", "line"):
            self.open.append(tag)
        if tag in ("script", "link", "img", "iframe") or "src" in attrs or "href" in attrs:
            self.external.append(tag)
        if tag == "section":
            self.sections += 1
        if tag == "rect":
            self._rect = {"fill": attrs.get("fill"), "dashed": "stroke-dasharray" in attrs, "title": ""}
            self.bars.append(self._rect)
            self.open.append("rect")
        if tag == "line":
            self.lines += 1
            self.open.append("line")
        if tag == "tr" and attrs.get("class"):
            self.rows.append(attrs["class"])
        if tag == "title":
            self._in_title = True

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
        self.open.pop()
        if tag == "title":
            self._in_title = False
        if tag == "rect":
            self._rect = None

    def handle_data(self, data):
        if self._in_title and self._rect is not None:
            self._rect["title"] += data


class FirstWordFirst(HeldAfterRejection):
    """Every branch after a draft step streams its first word before anything else happens to it."""

    def target_branch(self, prefix, continuation, max_step_tokens, rid, on_progress=None):
        if continuation and on_progress is not None:
            [step] = self.target(prefix, [continuation], max_step_tokens, commit_prefix=False)
            on_progress(step.text.split(" ")[0] + " ", 1)
        return super().target_branch(prefix, continuation, max_step_tokens, rid, on_progress)


def traced_run():
    """Round 0 accepts s0..s2 and hands its bonus branch on after one token; round 1's draft is rejected and the
    branch after it aborted."""
    models = FirstWordFirst(TARGET, DRAFT)
    verifier = FastPathVerifier(ScriptedJudge(ACCEPT))
    return SyncEngine(LookaheadConfig(depth=3, fork="streamed", handoff_tokens=1), models, verifier).answer("q")


def test_the_page_parses_and_draws_every_round_branch_judge_call_and_decision(tmp_path):
    result = traced_run()
    page = Page()
    page.feed(render(result.round_log, "a <run> & its trace"))
    page.close()
    assert page.open == [] and page.external == []  # well nested, self-contained
    assert page.sections == len(result.round_log)
    assert page.lines == sum(r.decided_s is not None for r in result.round_log)  # one decision line per round
    spans = [s for r in result.round_log for s in r.spans]
    assert len(page.bars) == len(spans)
    aborted = [bar for bar in page.bars if "aborted" in bar["title"]]
    assert aborted and all(bar["dashed"] for bar in aborted)  # what the rejection stopped
    assert any("handed on" in bar["title"] for bar in page.bars)
    assert page.rows.count("accepted") == sum(r.accepted for r in result.round_log)
    assert page.rows.count("rejected") == sum(r.positions - r.accepted for r in result.round_log)


def test_the_trace_command_reads_a_run_json_file_and_prints_its_summary(tmp_path, capsys):
    from cli_invoke import invoke

    result = traced_run()
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(run_json(result)))
    out = tmp_path / "trace.html"
    done = invoke(capsys, "trace", str(run_file), "--out", str(out))
    assert done.returncode == 0, done.stderr
    rounds, _ = load_rounds(run_file)
    assert done.stdout.splitlines() == summary_lines(rounds)
    assert "aborted" in done.stdout and "handed on to the next round 1" in done.stdout
    page = Page()
    page.feed(out.read_text())
    assert page.sections == len(result.round_log)


@pytest.mark.parametrize("content, message", [
    ("not json", "not JSON"),
    ('{"text": "x"}', "no round_log"),
    ('{"round_log": [{"index": "x"}]}', "index"),
])
def test_a_file_that_is_not_a_run_is_a_one_line_error(tmp_path, content, message):
    path = tmp_path / "run.json"
    path.write_text(content)
    with pytest.raises(LookaheadError, match=message):
        load_rounds(path)
    with pytest.raises(LookaheadError, match="no such|No such"):
        load_rounds(tmp_path / "missing.json")
