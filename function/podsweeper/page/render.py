"""The replay page as one self-contained HTML document: a header, then per job its timeline,
its decisions and the evidence of the pods it deleted.

No script, no external resource: the Content-Security-Policy forbids any fetch, the CSS is
inline and every string from the stream goes through `svg.esc`. Pure: the caller writes it.
"""

from __future__ import annotations

from podsweeper.page.model import JobView, Page
from podsweeper.page.style import CSS
from podsweeper.page.svg import esc, hms, timeline

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _decisions_table(job: JobView) -> str:
    if not job.decisions:
        return '<p class="none">No decisions.</p>'
    rows = "".join(
        f'<tr><td class="mono">{hms(d.time)}</td>'
        f'<td><span class="pill decision-{esc(d.action)}">{esc(d.action)}</span></td>'
        f'<td class="mono">{esc(d.rule)}</td><td>{esc(d.target)}</td><td>{esc(d.result)}</td>'
        f'<td>{esc(d.reason)}</td><td class="mono" title="{esc(d.trigger)}">{esc(d.where)}</td></tr>'
        for d in job.decisions
    )
    return (
        '<table class="decisions"><thead><tr><th>time</th><th>action</th><th>rule</th><th>target</th>'
        f"<th>result</th><th>reason</th><th>event</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _optional(value: object) -> str:
    return "–" if value is None else esc(value)


def _evidence_table(job: JobView) -> str:
    if not job.evidence:
        return ""
    rows = []
    for item in job.evidence:
        containers = item.containers or (None,)
        for c in containers:
            cells = (
                f"<td>{esc(c.name)}</td><td>{c.restart_count}</td><td>{_optional(c.exit_code)}</td>"
                f"<td>{_optional(c.reason)}</td><td>{_optional(c.waiting_reason)}</td>"
                f"<td>{_optional(c.message)}</td>"
                if c is not None
                else '<td colspan="6" class="none">no container evidence</td>'
            )
            rows.append(
                f"<tr><td>{esc(item.pod)}</td><td class='mono'>{hms(item.time)}</td>"
                f"<td>{esc(item.result)}</td>"
                f"<td class='mono'>{esc(item.rule)}</td>{cells}</tr>"
            )
    return (
        "<h3>Evidence of deleted pods</h3><table class='evidence'><thead><tr><th>pod</th><th>time</th>"
        "<th>result</th><th>rule</th><th>container</th><th>restarts</th><th>exit code</th><th>reason</th>"
        f"<th>waiting</th><th>message</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _legend() -> str:
    items = [
        ("pending", "Pending"),
        ("running", "Running, active"),
        ("succeeded", "Succeeded, Complete(d)"),
        ("failed", "Failed"),
        ("unknown", "Unknown"),
        ("created", "created"),
        ("suspended", "suspended"),
        ("deleted", "job deleted"),
        ("orphaned", "no controller (orphaned)"),
        ("decision-delete", "▼ delete"),
        ("decision-warn", "▼ warn"),
        ("decision-suspend", "▼ suspend"),
        ("decision-skip", "▼ skip"),
    ]
    swatches = "".join(f'<span><span class="sw {cls}"></span>{esc(text)}</span>' for cls, text in items)
    return (
        f'<div class="legend">{swatches}<span>hatched: CrashLoopBackOff</span>'
        "<span>↻N: restart count went up</span><span>✕: pod, JobSet or Job deleted</span>"
        "<span>○ ↻N: recorded event after it was gone (ignored), its restart count</span>"
        "<span>hover a bar or mark for details</span></div>"
    )


def _range(job: JobView) -> str:
    zone = f" {job.start.tzname()}" if job.start.tzname() else ""
    return f"{job.start:%Y-%m-%d %H:%M:%S} – {hms(job.end)}{zone}"


def render(page: Page) -> str:
    """The whole page for a model."""
    counts = ", ".join(f"{count} × {key}" for key, count in page.counts) or "none"
    sections = "".join(
        f'<section class="job"><h2>{esc(job.title)}</h2><div class="sub">{esc(job.subtitle)} · '
        f"{esc(_range(job))}</div>{timeline(job)}"
        f"<h3>Decisions</h3>{_decisions_table(job)}{_evidence_table(job)}</section>"
        for job in page.jobs
    )
    defs = (
        '<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>'
        '<pattern id="crash" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)">'
        '<rect width="3" height="6" fill="#7a1010" fill-opacity="0.55"/></pattern></defs></svg>'
    )
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>podsweeper replay: {esc(', '.join(page.files))}</title><style>{CSS}</style></head>"
        f"<body>{defs}<h1>podsweeper replay</h1>"
        f'<div class="sub">{esc(", ".join(page.files) or "no events")} · {page.events} events '
        f"({page.ignored_events} ignored) · simulated cluster, nothing real was touched</div>"
        f"<div>decisions: {esc(counts)}</div>"
        f"<div>pods left in the simulated cluster: {esc(', '.join(page.pods_left) or 'none')}</div>"
        f"{_legend()}{sections or '<p class=none>No training jobs or pods in these events.</p>'}"
        "</body></html>\n"
    )
