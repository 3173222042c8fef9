"""Where a report's numbers come from and where they stop: the banner at the top of every page,
the "where this evidence stops" box, and the record the index is built from.

A page says "measured anew" only for a file dated after `measured_since`, which only the
runner sets (notebooks.params.RUNNER_ONLY), and only after kernel.gpu_run ran in the same
invocation; nothing a user passes can make a recorded file look fresh.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from .data import PROVENANCE_KEYS, MeasurementError

# The GPU the service runs on (design.md). The kernel is built for it in every run; until a
# measurement file names it, every page says it was never run there.
PRODUCTION_ARCH = "sm_120"
PRODUCTION_GPU = "RTX PRO 6000"
PRODUCTION_NAME = "RTX PRO 6000 Blackwell"


def _since(measured_since: str) -> datetime | None:
    if not measured_since:
        return None
    try:
        d = datetime.fromisoformat(measured_since.replace("Z", "+00:00"))
    except ValueError:
        raise MeasurementError(f"measured_since: not ISO-8601: {measured_since!r}") from None
    return d if d.tzinfo else d.replace(tzinfo=timezone.utc)


def measured_in_run(doc: dict, measured_since: str) -> bool:
    """True when kernel.gpu_run ran in this invocation (measured_since set) and wrote doc."""
    since = _since(measured_since)
    return since is not None and doc["_date"] >= since


def source(doc: dict, measured_since: str = "") -> dict:
    """Where one measurement came from: kind, file name, date, commit, GPU (+ SMs, versions)."""
    out = {"kind": doc["kind"], "file": Path(doc["_path"]).name}
    out.update({k: doc[k] for k in PROVENANCE_KEYS})
    out["fixture"] = bool(doc.get("fixture", False))
    out["measured_in_this_run"] = measured_in_run(doc, measured_since)
    return out


def banner(docs: list[dict], measured_since: str = "", head: str = "") -> str:
    """Markdown for the top of a report: where its numbers come from, and when. head replaces
    the first line (phase 3: the A/B ran now, only the emulators' model inputs are recorded)."""
    fresh = [measured_in_run(d, measured_since) for d in docs]
    if head:
        pass
    elif docs and all(fresh):
        head = ("**Measured anew** on this machine for this report (`kernel.gpu_run` ran in "
                "this invocation).")
    elif any(fresh):
        head = ("**Partly measured anew**: `kernel.gpu_run` ran in this invocation, but some "
                "files below are older recordings (column 'this run').")
    else:
        head = ("**Rendered from recorded measurements** (no new measurement in this run; "
                "`make phase2` measures anew on a machine with a CUDA GPU).")
    lines = [head, "", "| data | file | measured | this run | GPU (SMs) | commit | kernel source "
             "| driver / CUDA / torch |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for d, now in zip(docs, fresh):
        p = source(d, measured_since)
        tag = " **(test fixture, not a measurement)**" if p["fixture"] else ""
        ks = f"`{d['kernel_source']}`" if d.get("kernel_source") else "-"
        lines.append(f"| {p['kind']}{tag} | `{p['file']}` | {p['date']} | "
                     f"{'yes' if now else 'no'} | {p['gpu']} ({p['sms']}) "
                     f"| `{str(p['commit'])[:12]}` | {ks} | {p['driver']} / {p['cuda']} / {p['torch']} |")
    note = kernel_sources_note(docs)
    return "\n".join(lines + ([""] + [note] if note else []))


def kernel_sources_note(docs: list[dict]) -> str:
    """A line when the shown files were measured on more than one kernel source (the hash of
    kernel/csrc that each file records): each number is of the kernel its file names."""
    by: dict[str, list[str]] = {}
    for d in docs:
        if d.get("kernel_source"):
            by.setdefault(d["kernel_source"], []).append(d["kind"])
    if len(by) < 2:
        return ""
    parts = "; ".join(f"`{k}`: {', '.join(kinds)}" for k, kinds in by.items())
    return (f"These files were measured on {len(by)} kernel sources ({parts}): each number on this page "
            "is of the kernel its file names.")


# kernel.build.KERNELS: a record made before the probe kernel had a short name kept its
# mangled one (one per instantiation), read as the kernel it is
BUILD_KERNELS = ("mla_verify_kernel", "mla_verify_combine", "mma_ceiling_kernel", "mma_ldsm_probe_kernel")


def _kernel_name(name: str) -> str:
    return next((k for k in BUILD_KERNELS if k in name), name)


def production_build(docs: list[dict]) -> dict | None:
    """The sm_120 entries of the newest bench file's build record ('resources'), summed up:
    {"file", "kernels", "registers", "spills"}, or None when no shown file has one."""
    for d in sorted(docs, key=lambda d: d["_date"], reverse=True):
        res = [r for r in d.get("resources") or [] if r.get("arch") == PRODUCTION_ARCH]
        if res:
            return {"file": Path(d["_path"]).name, "kernels": sorted({_kernel_name(r["kernel"]) for r in res}),
                    "registers": max(int(r.get("registers") or 0) for r in res),
                    "spills": sum(int(r.get("spill_stores") or 0) + int(r.get("spill_loads") or 0)
                                  for r in res)}
    return None


def evidence_limits(docs: list[dict]) -> dict:
    """What the shown files cover: the GPUs they were measured on, whether the production
    GPU is among them, and what the build record says about the production arch."""
    gpus = sorted({f"{d['gpu']} ({d['sms']} SMs)" for d in docs})
    ran = any(PRODUCTION_GPU in str(d["gpu"]) for d in docs)
    return {"gpus": gpus, "production_ran": ran, "production_build": production_build(docs)}


def evidence_box(docs: list[dict], what: str = "Every number on this page") -> str:
    """Markdown: the GPU the data came from, and that the production GPU was compiled for but
    never run (unless a shown file was measured on it)."""
    lim = evidence_limits(docs)
    on = ", ".join(f"**{g}**" for g in lim["gpus"]) or "no GPU (no measurement file)"
    b = lim["production_build"]
    built = (f"`{b['file']}` records its build: {', '.join(b['kernels'])}, up to "
             f"{b['registers']} registers, {b['spills']} bytes spilled" if b else
             "by `make kernel-build`; the files shown carry no build record")
    if lim["production_ran"]:
        prod = f"The production GPU, {PRODUCTION_ARCH} ({PRODUCTION_NAME}), is among them."
    else:
        prod = (f"The production GPU, {PRODUCTION_ARCH} ({PRODUCTION_NAME}), is compiled for "
                f"({built}) **but was never run**: none of these files was measured on it.")
    return f"**Where this evidence stops.** {what} was measured on {on}. {prod}"


def write_record(path: str | Path, title: str, docs: list[dict], *, measured_since: str = "",
                 findings: list[dict] | None = None, extra: dict | None = None) -> None:
    """The notebook's last act: a small JSON the runner turns into the report's index entry.

    The runner treats a missing record as a failed run, so a notebook that stopped early can
    never look rendered. Nothing in it depends on the time of rendering, so an unchanged
    render is byte-identical.
    """
    if not path:
        return
    sources = [source(d, measured_since) for d in docs]
    rec = {"title": title, "measured_now": bool(sources) and all(
               s["measured_in_this_run"] for s in sources),
           "sources": sources, "evidence": evidence_limits(docs),
           "findings": findings or [], **(extra or {})}
    Path(path).write_text(json.dumps(rec, indent=1, default=str, sort_keys=True))
