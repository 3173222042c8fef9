"""reports/index.html: the verdict first (headline findings with links to their evidence), then
every rendered report with the date, commit and GPU of the data it shows.

Built only from the <meta name="mla-verify-report"> record each report carries (written by its
notebook through notebooks.run), so the index always matches the HTML files next to it and
holds no number of its own. Nothing in it depends on when it was written.
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

from . import findings

META_RE = re.compile(r'<meta name="mla-verify-report" content="([^"]*)">')
# The headline: which report's finding answers which question, in reading order.
HEADLINE = (("02_paged_bf16", "correctness"), ("02_paged_bf16", "centre"),
            ("02_paged_bf16", "tiers"), ("02_paged_bf16", "step"),
            ("02_paged_bf16", "backend"), ("02_paged_bf16", "fp8"), ("02_paged_bf16", "dcp"),
            ("03_canary_ab", "decision"),
            ("03_canary_ab", "ratio"), ("03_canary_ab", "planted"),
            ("02_paged_bf16", "extend-kernel"),   # EXTEND: the kernel's evidence, then the real server's
            ("03_canary_ab", "extend"),
            ("02_paged_bf16", "production"))


def read_record(path: Path) -> dict | None:
    """The record embedded in a rendered report, or None for an HTML file without one."""
    m = META_RE.search(path.read_text(errors="replace")[:200_000])
    return json.loads(html.unescape(m.group(1))) if m else None


def _sources(rec: dict) -> str:
    items = []
    for s in rec.get("sources", []):
        fx = " <b>test fixture, not a measurement</b>" if s.get("fixture") else ""
        now = " (measured in the run that rendered it)" if s.get("measured_in_this_run") else ""
        items.append(f"<li><code>{html.escape(s['kind'])}</code>: measured "
                     f"{html.escape(str(s['date']))}{now} on {html.escape(str(s['gpu']))}, commit "
                     f"<code>{html.escape(str(s['commit'])[:12])}</code> "
                     f"(<code>{html.escape(s['file'])}</code>){fx}</li>")
    if rec.get("emulated") is not None:
        what = "emulated endpoints (local emulators, not a live service)" if rec["emulated"] \
            else "live endpoints"
        eps = "; ".join(html.escape(e) for e in rec.get("endpoints", []))
        items.append(f"<li>A/B against {what}: {eps}</li>")
    return "<ul>" + "".join(items) + "</ul>" if items else "<p>no measurement data</p>"


def _how(rec: dict) -> str:
    if rec.get("emulated") is not None:
        rs = rec.get("real_server")
        real = ("; no real-server canary in the data" if rs is None else
                f"; the real-server canary from {rs['file']}: {rs['label']}" + (
                    "" if rs["emulated"] else f", {str(rs['date'])[:10]}"))
        return "A/B run when the report was rendered" + (
            "; the emulators' speed model reads the recorded measurements below"
            if rec.get("sources") else "") + (real if "real_server" in rec else "")
    return ("measured anew for this report" if rec.get("measured_now") else
            "rendered from recorded measurements")


def verdict(records: dict[str, dict]) -> str:
    """HTML of the verdict box: one sentence from the findings' statuses, then the headline
    findings, each linking to the section of its report that shows the evidence."""
    picked = []
    for stem, fid in HEADLINE:
        f = next((f for f in records.get(stem, {}).get("findings", []) if f["id"] == fid), None)
        if f is not None:
            picked.append((stem, f))
    if not picked:
        return ("<p>No report carries findings yet: run <code>make phase2</code> "
                "(and <code>make phase3</code>).</p>")
    kernel = [f for s, f in picked if s == "02_paged_bf16" and f["id"] != "production"]
    failing = [f["check"] for _, f in picked if f["status"] == "fail"]
    open_ = [f["check"] for _, f in picked if f["status"] == "open"]
    if failing:
        head = "Not ready: these checks fail: " + "; ".join(failing) + "."
    elif kernel and all(f["status"] in ("pass", "open") for f in kernel) and \
            any(f["status"] == "pass" for f in kernel):
        head = ("The kernel is correct and faster than what CUDA servers run today, on the "
                "data shown.")
    else:
        head = "The kernel evidence is incomplete (phase 2 not rendered)."
    if open_:
        head += " Not shown yet: " + "; ".join(open_) + "."
    rows = "".join(findings.row(f, f"{stem}.html") for stem, f in picked)
    return findings.box([], f"<b>Verdict.</b> {html.escape(head)}", rows)


def write_index(reports_dir: str | Path) -> Path:
    """Write reports_dir/index.html for every *.html report there; returns its path."""
    reports_dir = Path(reports_dir)
    reports_dir.mkdir(parents=True, exist_ok=True)
    records, sections = {}, []
    for path in sorted(reports_dir.glob("*.html")):
        if path.name == "index.html":
            continue
        rec = read_record(path)
        if rec is None:
            continue
        records[path.stem] = rec
        sections.append(f'<section><h3><a href="{html.escape(path.name)}">'
                        f'{html.escape(rec.get("title", path.stem))}</a></h3>'
                        f'<p>{html.escape(_how(rec))}</p>{_sources(rec)}</section>')
    body = "\n".join(sections) or \
        "<p>No reports rendered yet: run <code>make reports</code>.</p>"
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>mla-verify reports</title>
<style>body{{font-family:sans-serif;max-width:72em;margin:1.5em auto;line-height:1.35}}
section{{border-top:1px solid #ccc;padding-top:.2em}} h1{{margin:.2em 0}}</style></head>
<body><h1>mla-verify: MLA tree-verify attention for SGLang</h1>
{verdict(records)}
<p>Every number above is computed from the measurement JSON in <code>reports/data/</code> by
the report it links to; <code>make phase2</code> regenerates the kernel evidence.</p>
<h2>Reports</h2>
{body}
</body></html>
"""
    out = reports_dir / "index.html"
    out.write_text(page)
    return out
