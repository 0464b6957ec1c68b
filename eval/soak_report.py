"""The soak's report: counts of how requests ended, one row a minute, whether drafting came back after the
faults, and the tables and summary lines `lookahead bench soak` prints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lookahead_reasoning.eval.loadtest import percentile
from lookahead_reasoning.eval.soak_clients import Outcome
from lookahead_reasoning.eval.soak_stack import MAX_BODY_BYTES

if TYPE_CHECKING:
    from lookahead_reasoning.eval.soak import SoakSettings

WINDOW_S = 60.0  # the report's rows
DRAFTING_BACK = 0.8  # after the last fault, drafted answers per minute must come back to this share of the first's
RECOVERY_SETTLE_S = 15.0  # ...counted from this long after the fault ended (runs the fault degraded end first)
RECOVERY_MIN_S = 30.0  # ...over at least this long, else the soak is too short to tell


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _counts(outcomes: list[Outcome]) -> dict:
    errors: dict[str, int] = {}
    for o in outcomes:
        if o.status not in ("200", "left", "lost"):
            errors[o.status] = errors.get(o.status, 0) + 1
    return {
        "sent": len(outcomes),
        "answered": sum(o.status == "200" for o in outcomes),
        "degraded": sum(o.degraded for o in outcomes),
        "drafted": sum(o.drafted for o in outcomes),
        "left_on_purpose": sum(o.status == "left" for o in outcomes),
        "errors": dict(sorted(errors.items())),
        "lost": sum(o.status == "lost" for o in outcomes),
    }


def build_report(settings: SoakSettings, outcomes: list[Outcome], faults: list[dict], samples: list[dict],
                 final: dict, wall_s: float) -> dict:
    """The soak's report (`lookahead bench soak` writes it as soak.json), `passed` included."""
    windows = max(1, int(-(-wall_s // WINDOW_S)))
    minutes = []
    for w in range(windows):
        lo, hi = w * WINDOW_S, (w + 1) * WINDOW_S
        inside = [o for o in outcomes if lo <= o.end_s < hi or (w == windows - 1 and o.end_s >= hi)]
        latencies = [o.latency_s for o in inside if o.status == "200"]
        sampled = [s for s in samples if lo <= s["t_s"] < hi or (w == windows - 1 and s["t_s"] >= hi)]
        counts = _counts(inside)
        minutes.append({
            "minute": w + 1, "sent": counts["sent"], "answered": counts["answered"], "drafted": counts["drafted"],
            "degraded": counts["degraded"],
            "errors": sum(counts["errors"].values()), "lost": counts["lost"],
            "p50_s": _rounded(percentile(latencies, 0.5), 3), "p99_s": _rounded(percentile(latencies, 0.99), 3),
            "rss_mib": _rounded(max((s["rss_mib"] for s in sampled), default=None), 1),
            "threads": max((s["threads"] for s in sampled), default=None),
            "fds": max((s["fds"] for s in sampled), default=None),
        })
    by_kind: dict[str, dict[str, int]] = {}
    for o in outcomes:
        row = by_kind.setdefault(o.kind, {})
        row[o.status] = row.get(o.status, 0) + 1
    lost = [o for o in outcomes if o.status == "lost"]
    totals = _counts(outcomes)
    drafting = _drafting_recovery(outcomes, faults, settings.hold_s, wall_s)
    passed = (totals["lost"] == 0 and totals["errors"].get("500", 0) == 0 and final.get("status") == 200
              and drafting["back"] is not False)
    rss = [s["rss_mib"] for s in samples]
    return {
        "passed": passed,
        "settings": {**settings.model_dump(), "hold_s": settings.hold_s,
                     "request_timeout_s": settings.request_timeout_s, "client_timeout_s": settings.client_timeout_s,
                     "max_body_bytes": MAX_BODY_BYTES},
        "wall_s": round(wall_s, 1),
        "requests": totals,
        "by_kind": {k: dict(sorted(v.items())) for k, v in sorted(by_kind.items())},
        "lost": [{"t_s": round(o.end_s, 1), "kind": o.kind, "why": o.detail} for o in lost[:50]],
        "unexpected_statuses": sorted({o.unexpected for o in outcomes if o.unexpected}),
        "unshaped_errors": sorted({o.detail for o in outcomes if o.detail.startswith("an error not in")})[:20],
        "faults": faults,
        "drafting": drafting,
        "minutes": minutes,
        "frontend": {"rss_first_mib": rss[0] if rss else None, "rss_last_mib": rss[-1] if rss else None,
                     "rss_max_mib": max(rss, default=None), "samples": samples},
        "final_request": final,
    }


def _drafting_recovery(outcomes: list[Outcome], faults: list[dict], hold_s: float, wall_s: float) -> dict:
    """Drafted answers per minute before the first fault and after the last one (from RECOVERY_SETTLE_S
    after it ended), and whether the second came back to DRAFTING_BACK of the first (None: no fault, or
    too little time before or after the faults to tell)."""
    def per_minute(lo: float, hi: float) -> float | None:
        if hi - lo < RECOVERY_MIN_S:
            return None
        return 60.0 * sum(o.drafted for o in outcomes if lo <= o.end_s < hi) / (hi - lo)

    before = per_minute(0.0, min((f["t_s"] for f in faults), default=wall_s))
    after = per_minute(max(f["t_s"] for f in faults) + hold_s + RECOVERY_SETTLE_S, wall_s) if faults else None
    back = None if before is None or after is None else after >= DRAFTING_BACK * before
    return {"before_faults_per_minute": _rounded(before, 1), "after_faults_per_minute": _rounded(after, 1),
            "back": back}


def soak_tables(report: dict):
    """Rich tables: the totals (with the faults) and one row a minute."""
    from rich.table import Table

    r = report["requests"]
    totals = Table(title="bench soak: lookahead serve over simulated servers, with faults")
    for column in ("sent", "answered (200)", "drafted", "degraded", "left on purpose", "errors by status", "lost"):
        totals.add_column(column, justify="right")
    errors = ", ".join(f"{code}: {n}" for code, n in r["errors"].items()) or "none"
    totals.add_row(str(r["sent"]), str(r["answered"]), str(r["drafted"]), str(r["degraded"]),
                   str(r["left_on_purpose"]), errors, str(r["lost"]))
    per_minute = Table(title="per minute (latency of answers; the frontend's peak RSS, threads and open files)")
    for column in ("minute", "sent", "answered", "drafted", "degraded", "errors", "lost", "p50 s", "p99 s",
                   "RSS MiB", "threads", "fds"):
        per_minute.add_column(column, justify="right")

    def fmt(value, spec=".2f") -> str:
        return "n/a" if value is None else format(value, spec)

    for m in report["minutes"]:
        per_minute.add_row(str(m["minute"]), str(m["sent"]), str(m["answered"]), str(m["drafted"]), str(m["degraded"]),
                           str(m["errors"]),
                           str(m["lost"]), fmt(m["p50_s"]), fmt(m["p99_s"]), fmt(m["rss_mib"], ".0f"),
                           fmt(m["threads"], "d"), fmt(m["fds"], "d"))
    return totals, per_minute


def soak_summary(report: dict) -> list[str]:
    """Lines under the tables: the faults, what went wrong, the verdict."""
    faults = ", ".join(f"{f['kind']} {f['role']} at {f['t_s']:.0f} s" for f in report["faults"])
    lines = [f"faults ({report['settings']['hold_s']:g} s each): {faults}" if faults else "faults: none"]
    final = report["final_request"]
    lines.append(f"after the last fault: a request got {final.get('status')}"
                 + (" (degraded)" if final.get("degraded") else ""))
    fe = report["frontend"]
    if fe.get("tracebacks"):
        lines.append(f"the frontend logged {fe['tracebacks']} traceback(s): {fe.get('log')}")
    if fe.get("exit_code") is not None:
        lines.append(f"the frontend exited with code {fe['exit_code']} during the soak")
    for entry in report["lost"][:10]:
        lines.append(f"lost at {entry['t_s']:.0f} s ({entry['kind']}): {entry['why']}")
    for entry in report["unexpected_statuses"][:10]:
        lines.append(f"hostile request answered otherwise: {entry}")
    drafting = report["drafting"]
    if drafting["back"] is None:
        lines.append("drafting after the faults: too short a soak to tell")
    else:
        lines.append(f"drafted answers per minute: {drafting['before_faults_per_minute']:g} before the faults, "
                     f"{drafting['after_faults_per_minute']:g} after the last"
                     + ("" if drafting["back"] else f" (FAILED: under {DRAFTING_BACK:.0%})"))
    r = report["requests"]
    verdict = "passed" if report["passed"] else "FAILED"
    lines.append(f"{verdict}: {r['lost']} lost, {r['errors'].get('500', 0)} × 500")
    return lines
