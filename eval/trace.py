"""A run's timeline as one self-contained HTML page (`lookahead trace`, `lookahead run --trace`).

Round by round it draws the draft's requests, every target branch and the judge's calls on
the answer's time axis (RoundRecord.spans), marks the moment the round's outcome was known,
colours each branch by what became of it (kept, judged, handed on to the next round,
aborted, unused), and lists each judged draft step beside the target's step with the
verifier's score. Inline SVG and CSS only: it opens in a browser without a server or network.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path

from pydantic import ValidationError

from lookahead_reasoning.errors import LookaheadError, validation_message
from lookahead_reasoning.runtime.results import RoundRecord

FATE_COLOURS = {
    "kept": "#2e8b57", "judged": "#4682b4", "handed on": "#8a5cc2", "aborted": "#d9534f", "unused": "#9e9e9e", "": "#4682b4",
}
ROLE_COLOURS = {"draft": "#e0a030", "verify": "#555555"}
WIDTH = 900  # px of the time axis
LANE = 18  # px per lane


def load_rounds(path: Path) -> tuple[list[RoundRecord], dict]:
    """The rounds of a `lookahead run --json` file (or a LookaheadResult's JSON), and the rest of the object."""
    try:
        data = json.loads(path.read_text())
    except OSError as error:
        raise LookaheadError(f"{path}: {error.strerror}") from None
    except ValueError:
        raise LookaheadError(f"{path}: not JSON (write it with lookahead run --json)") from None
    if not isinstance(data, dict) or not isinstance(data.get("round_log"), list):
        raise LookaheadError(f"{path}: no round_log (write it with lookahead run --json)")
    try:
        rounds = [RoundRecord.model_validate(r) for r in data["round_log"]]
    except ValidationError as error:
        raise LookaheadError(f"{path}: {validation_message(error)}") from None
    return rounds, data


def summary_lines(rounds: list[RoundRecord]) -> list[str]:
    """What a reader checks first: rounds, acceptance, where the target's tokens and branches went."""
    judged = sum(r.positions for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    tokens: Counter[str] = Counter()
    branches: Counter[str] = Counter()
    for r in rounds:
        for span in r.spans:
            if span.role == "target" and span.fate != "handed on":  # counted in the round that used it
                tokens[span.fate or "judged"] += span.tokens
                branches[span.fate or "judged"] += 1
    handed_on = sum(1 for r in rounds for span in r.spans if span.fate == "handed on")
    acceptance = f" ({accepted / judged:.2f})" if judged else ""
    return [
        f"rounds {len(rounds)}, draft steps accepted {accepted}/{judged}{acceptance}",
        "target branches: " + ", ".join(f"{fate} {n}" for fate, n in sorted(branches.items()))
        + f"; handed on to the next round {handed_on}",
        "target tokens: " + ", ".join(f"{fate} {n}" for fate, n in sorted(tokens.items())),
    ]


def _bar(x0: float, x1: float, y: int, colour: str, title: str, dashed: bool = False) -> str:
    width = max(1.5, x1 - x0)
    style = ' stroke="#000" stroke-dasharray="3,2"' if dashed else ""
    return (f'<rect x="{x0:.1f}" y="{y + 2}" width="{width:.1f}" height="{LANE - 4}" fill="{colour}"{style}>'
            f"<title>{html.escape(title)}</title></rect>")


def _round_svg(record: RoundRecord, t0: float, t1: float) -> str:
    scale = WIDTH / max(1e-9, t1 - t0)
    lanes: list[str] = []
    for span in record.spans:
        key = f"{span.role}:{span.label}"
        if key not in lanes:
            lanes.append(key)
    height = LANE * (len(lanes) + 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH + 160}" height="{height}" role="img">']
    for i, key in enumerate(lanes):
        parts.append(f'<text x="0" y="{i * LANE + 13}" font-size="11">{html.escape(key.replace(":", " "))}</text>')
    for span in record.spans:
        y = lanes.index(f"{span.role}:{span.label}") * LANE
        colour = FATE_COLOURS.get(span.fate, "#4682b4") if span.role == "target" else ROLE_COLOURS[span.role]
        x0 = 150 + (span.start - t0) * scale
        x1 = 150 + (span.end - t0) * scale
        title = f"{span.role} {span.label}: {span.start:.2f}–{span.end:.2f} s, {span.tokens} tokens"
        title += f", {span.fate}" if span.fate else ""
        parts.append(_bar(x0, x1, y, colour, title, dashed=span.fate == "aborted"))
    if record.decided_s is not None:
        x = 150 + (record.decided_s - t0) * scale
        parts.append(f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height - LANE}" stroke="#000" stroke-width="2">'
                     f"<title>decided at {record.decided_s:.2f} s</title></line>")
    parts.append(f'<text x="150" y="{height - 4}" font-size="10">{t0:.2f} s</text>')
    parts.append(f'<text x="{WIDTH + 150}" y="{height - 4}" font-size="10" text-anchor="end">{t1:.2f} s</text>')
    parts.append("</svg>")
    return "".join(parts)


def _pairs_table(record: RoundRecord) -> str:
    if not record.judged:
        return ""
    rows = []
    for i, pair in enumerate(record.judged, start=1):
        verdict = "accepted" if pair.accept else "rejected"
        score = "" if pair.score is None else f"{pair.score:.3f}"
        rows.append(f'<tr class="{verdict}"><td>d{i}</td><td><pre>{html.escape(pair.draft)}</pre></td>'
                    f"<td><pre>{html.escape(pair.target)}</pre></td><td>{verdict}</td><td>{score}</td>"
                    f"<td>{html.escape(pair.method)}</td></tr>")
    return ("<table><thead><tr><th></th><th>draft step</th><th>target step</th><th>verdict</th><th>score</th>"
            "<th>by</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _kept(record: RoundRecord) -> str:
    items = "".join(f'<li class="{s.source}"><b>{s.source}</b> <pre>{html.escape(s.text)}</pre></li>'
                    for s in record.kept)
    return f"<ol class=\"kept\">{items}</ol>" if items else "<p>nothing kept (the bonus step goes on)</p>"


def render(rounds: list[RoundRecord], title: str = "lookahead trace", extra: dict | None = None) -> str:
    """The page."""
    extra = extra or {}
    body = [f"<h1>{html.escape(title)}</h1>", "<ul class=\"summary\">"]
    body += [f"<li>{html.escape(line)}</li>" for line in summary_lines(rounds)]
    speedup = extra.get("speedup")
    if isinstance(speedup, (int, float)):
        body.append(f"<li>AR time over LR time {speedup:.3f}×</li>")
    body.append("</ul>")
    legend = "".join(f'<span class="key" style="background:{c}">{html.escape(f or "judged")}</span>'
                     for f, c in FATE_COLOURS.items() if f)
    body.append(f"<p>target branches: {legend} · <span class=\"key\" style=\"background:{ROLE_COLOURS['draft']}\">"
                f"draft</span> <span class=\"key\" style=\"background:{ROLE_COLOURS['verify']}\">verify</span>"
                " · the black line: the round's decision</p>")
    for record in rounds:
        starts = [s.start for s in record.spans] or [0.0]
        ends = [s.end for s in record.spans] + ([record.decided_s] if record.decided_s is not None else [])
        t0, t1 = min(starts), max(ends or [min(starts) + 1.0])
        head = (f"round {record.index} ({record.kind}): γ = {record.depth}, "
                f"accepted {record.accepted}/{record.positions}, "
                f"{len(record.kept)} step{'s' * (len(record.kept) != 1)} kept, wall {record.wall_s:.2f} s")
        if record.decided_s is not None:
            head += f", decided at {record.decided_s:.2f} s"
        body.append(f'<section class="round"><h2>{html.escape(head)}</h2>')
        body.append(_round_svg(record, t0, t1) if record.spans else "<p>no timeline recorded</p>")
        body.append(_pairs_table(record))
        body.append(_kept(record))
        body.append("</section>")
    style = (
        "body{font-family:sans-serif;margin:1em 2em}pre{white-space:pre-wrap;margin:0;font-size:12px}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}"
        "tr.accepted td:nth-child(4){color:#2e8b57}tr.rejected td:nth-child(4){color:#d9534f}"
        ".key{color:#fff;padding:1px 5px;margin:0 2px;border-radius:3px}section.round{border-top:1px solid #ddd}"
        "ol.kept li.draft b{color:#e0a030}ol.kept li.target b{color:#2e8b57}"
    )
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>")


def write_trace(rounds: list[RoundRecord], path: Path, title: str = "lookahead trace", extra: dict | None = None) -> None:
    try:
        path.write_text(render(rounds, title, extra))
    except OSError as error:
        raise LookaheadError(f"{path}: {error.strerror}") from None
