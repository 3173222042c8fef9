"""reports/index.html: one page linking every rendered report with the date, commit and GPU of
the data it shows. Built from the <meta name="mla-verify-report"> each report carries (written
by notebooks.run), so the index always matches the HTML files next to it.
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

META_RE = re.compile(r'<meta name="mla-verify-report" content="([^"]*)">')


def read_record(path: Path) -> dict | None:
    """The record embedded in a rendered report, or None for an HTML file without one."""
    m = META_RE.search(path.read_text(errors="replace")[:200_000])
    return json.loads(html.unescape(m.group(1))) if m else None


def _sources(rec: dict) -> str:
    items = []
    for s in rec.get("sources", []):
        fx = " <b>test fixture, not a measurement</b>" if s.get("fixture") else ""
        items.append(f"<li><code>{html.escape(s['kind'])}</code>: measured "
                     f"{html.escape(str(s['date']))} on {html.escape(str(s['gpu']))}, commit "
                     f"<code>{html.escape(str(s['commit'])[:12])}</code> "
                     f"(<code>{html.escape(s['file'])}</code>){fx}</li>")
    if rec.get("emulated") is not None:
        what = "emulated endpoints (local emulator, not a live service)" if rec["emulated"] \
            else "live endpoints"
        eps = ", ".join(html.escape(e) for e in rec.get("endpoints", []))
        items.append(f"<li>A/B against {what}: {eps}</li>")
    return "<ul>" + "".join(items) + "</ul>" if items else "<p>no measurement data</p>"


def write_index(reports_dir: str | Path) -> Path:
    """Write reports_dir/index.html listing every *.html report there; returns its path."""
    reports_dir = Path(reports_dir)
    reports_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for path in sorted(reports_dir.glob("*.html")):
        if path.name == "index.html":
            continue
        rec = read_record(path)
        if rec is None:
            continue
        how = "measured anew for this report" if rec.get("measured_now") else \
            "rendered from recorded measurements"
        rows.append(f'<section><h2><a href="{html.escape(path.name)}">'
                    f'{html.escape(rec.get("title", path.stem))}</a></h2>'
                    f'<p>rendered {html.escape(rec.get("rendered", "?"))}, {how}</p>'
                    f'{_sources(rec)}</section>')
    body = "\n".join(rows) or "<p>No reports rendered yet: run <code>make reports</code>.</p>"
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>mla-verify reports</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.4}}
section{{border-top:1px solid #ccc;padding-top:.3em}}</style></head>
<body><h1>mla-verify: phase reports</h1>
<p>Each report is rendered from the measurement JSON in <code>reports/data/</code> by the
notebooks in <code>notebooks/</code>; <code>make phase2</code> regenerates the kernel evidence.</p>
{body}
</body></html>
"""
    out = reports_dir / "index.html"
    out.write_text(page)
    return out
