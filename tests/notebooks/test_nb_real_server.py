"""Phase 3's real-server section and the index's "canary on a live service" line, rendered in smoke
mode from the real-server job's `--emulate` output (fixtures/real-server-emulated-*.json: "emulated"
and "fixture" true), from a copy of it that this test turns into what a GPU run writes (still
"fixture": true, so only a smoke render shows it), and from no file at all. Every number checked
on the page is computed here from the JSON it was rendered from."""
from __future__ import annotations

import copy
import json
import re
import shutil
from html import unescape
from pathlib import Path

import pytest

from kernel.sglang.real_server.breakdown import classify, slopes
from notebooks import data, findings, index

FIXTURE = sorted((Path(__file__).parent / "fixtures").glob("real-server-emulated-*.json"))[-1]
SMOKE = ("-p", "smoke", "true", "-p", "context_tokens", "16384", "-p", "rounds", "5",
         "-p", "max_new_tokens", "4", "-p", "time_scale", "0.01")
REAL_LABEL = "real SGLang 0.5.23 server, dummy-weight 4-layer MLA model, one H200"
ON, OFF = ", EAGLE's draft extend on, through the kernel", ", EAGLE's draft extend off, left to SGLang"


def emulated_doc() -> dict:
    return json.loads(FIXTURE.read_text())


def trace(layers: int, steps: int = 3, step_us: int = 10000) -> list[dict]:
    """A small profiler trace in SGLang's span names: per step a draft graph, a verify graph with
    our kernel and a GEMM per layer, sampling outside any span."""
    ev, corr = [], 0
    for s in range(steps + 1):
        t = s * step_us
        ev.append({"ph": "X", "cat": "user_annotation", "name": "draft", "pid": 7, "tid": 1, "ts": t, "dur": 900})
        corr += 1
        ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 7, "tid": 1, "ts": t + 10,
                "dur": 5, "args": {"correlation": corr}},
               {"ph": "X", "cat": "kernel", "name": "nvjet_gemm", "pid": 0, "tid": 9, "ts": t + 100, "dur": 600,
                "args": {"correlation": corr}}]
        ev.append({"ph": "X", "cat": "user_annotation", "name": "step[VERIFY bs=1]", "pid": 7, "tid": 1,
                   "ts": t + 1000, "dur": 3000 + 400 * layers})
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 7, "tid": 1, "ts": t + 1010,
                   "dur": 5, "args": {"correlation": corr}})
        for i in range(layers):
            k = t + 1100 + 400 * i
            ev += [{"ph": "X", "cat": "kernel", "name": "mla_verify_kernel_small<4>", "pid": 0, "tid": 9, "ts": k,
                    "dur": 100, "args": {"correlation": corr}},
                   {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 9, "ts": k + 100, "dur": 300,
                    "args": {"correlation": corr}}]
    return ev


def as_gpu_run(doc: dict) -> dict:
    """The emulated run's JSON as a GPU run writes it: a real device, bundle and kernel, and
    classified breakdowns at 4 and 16 layers with their slope. Still a fixture."""
    d = copy.deepcopy(doc)
    device = {"gpu": "NVIDIA H200", "sms": 132, "driver": "580.00", "cuda": "13.0", "torch": "2.11.0"}
    d.update(emulated=False, fixture=True, **device, commit="c0ffee1",
             label=f"real SGLang 0.5.23 server, dummy-weight {d['layers']}-layer MLA model, one NVIDIA H200",
             bundle={"sglang": "0.5.23", "sha256": "ab" * 32}, kernel={"hash": "k3rn3lh45h", "prebuilt": True},
             device=device, date="2026-12-05T10:00:00Z")
    d["steps"]["setup"].update(device=device, bundle=d["bundle"], kernel=d["kernel"])
    by_layers = {n: classify(trace(n), n) for n in (4, 16)}
    d["breakdowns"] = {str(n): {**d["breakdowns"]["4"], "classified": c} for n, c in by_layers.items()}
    d["slopes"] = slopes(by_layers)
    return d


def write(dir_: Path, fixture_dir: Path, *docs: dict) -> Path:
    shutil.copytree(fixture_dir, dir_)
    for i, doc in enumerate(docs):
        (dir_ / f"real-server-{i}.json").write_text(json.dumps(doc))
    return dir_


def page_text(tmp_path: Path) -> str:
    html = (tmp_path / "reports" / "03_canary_ab.html").read_text()
    html = re.sub(r"<(style|script)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#x27;", "'").replace("&gt;", ">")


def verdict_text(tmp_path: Path) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", (tmp_path / "reports" / "index.html").read_text())))


# -- loading and findings (no render) ----------------------------------------------------------
def test_a_real_run_is_shown_before_a_newer_emulated_one(tmp_path):
    emu, real = emulated_doc(), as_gpu_run(emulated_doc())
    emu["date"] = "2027-01-01T00:00:00Z"           # newer than the real run
    d = tmp_path / "d"
    d.mkdir()
    assert data.real_server(d, allow_fixture=True) is None
    (d / "real-server-emulated.json").write_text(json.dumps(emu))
    assert data.real_server(d, allow_fixture=True)["emulated"] is True
    (d / "real-server-h200.json").write_text(json.dumps(real))
    got = data.real_server(d, allow_fixture=True)
    assert got["emulated"] is False and got["gpu"] == "NVIDIA H200"
    with pytest.raises(data.MeasurementError, match="test fixture"):
        data.real_server(d)                          # a fixture never renders outside smoke
    # a file from before the job wrote top-level provenance: taken from its device record
    old = {k: v for k, v in real.items() if k not in ("gpu", "sms", "driver", "cuda", "torch", "commit")}
    old["date"] = "2027-02-01T00:00:00Z"
    (d / "real-server-h200-old.json").write_text(json.dumps(old))
    got = data.real_server(d, allow_fixture=True)
    assert (got["gpu"], got["sms"], got["commit"]) == ("NVIDIA H200", 132, "not recorded")


def _loaded(doc, tmp_path, name="real-server-x.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return data.load_file(p, allow_fixture=True)


def test_the_live_canary_line_says_which_it_has(tmp_path):
    none = findings.live_canary(None, "PASS, on EMULATED endpoints")
    assert none["status"] == "open" and none["text"].startswith("only emulated endpoints: PASS")
    assert "no real-server run in the data" in none["text"]
    emu = findings.live_canary(_loaded(emulated_doc(), tmp_path), "PASS, on EMULATED endpoints")
    assert emu["status"] == "open" and "is an EMULATED run (real-server-x.json)" in emu["text"]
    real = _loaded(as_gpu_run(emulated_doc()), tmp_path)
    line = findings.live_canary(real, "unused")
    assert line["status"] == "pass" and line["id"] == "decision" and line["check"] == "canary on a live service"
    assert line["text"].startswith(f"PASS on a {REAL_LABEL}{ON} (2026-12-05, real-server-x.json)")
    assert "rolled back at the numerics gate" in line["text"] and "promote completed" in line["text"]
    broken = as_gpu_run(emulated_doc())
    broken["steps"]["planted"]["status"] = "failed"
    assert findings.live_canary(_loaded(broken, tmp_path), "unused")["status"] == "fail"
    del broken["steps"]["planted"]
    assert findings.live_canary(_loaded(broken, tmp_path), "unused")["status"] == "open"


def test_the_index_verdict_carries_the_line(tmp_path):
    real = _loaded(as_gpu_run(emulated_doc()), tmp_path)
    rec = {"03_canary_ab": {"findings": [findings.live_canary(real, "x"), findings.planted(real),
                                         findings.extend_followups(real)]}}
    html = unescape(index.verdict(rec))
    assert f"PASS on a {REAL_LABEL}{ON} (2026-12-05" in html and "03_canary_ab.html#real-server" in html
    assert "03_canary_ab.html#real-planted" in html and "03_canary_ab.html#real-extend" in html


# -- rendered pages ----------------------------------------------------------------------------
def test_the_emulated_run_is_labelled_emulated_everywhere(tmp_path, fixture_dir, cli):
    doc = emulated_doc()
    d = write(tmp_path / "data", fixture_dir, doc)
    assert cli(tmp_path, "phase3", *SMOKE, "-p", "data_dir", str(d)) == 0
    page = page_text(tmp_path)
    assert "Real-server canary: an EMULATED run of the job, not a real server" in page
    assert "EMULATED, not a real server." in page and "Real SGLang server canary" not in page
    for part in ("the canary's gates", "decode speed per arm", "a planted verify fault", "promote",
                 "where the flash arm's step goes", "follow-up turns and the prompt's prefill", "server arguments"):
        assert f"EMULATED real-server run, not a real server: {part}" in page, part
    assert "Real server:" not in page and "real SGLang 0." not in page
    # numbers from the JSON
    e = doc["extend_over_prefix"]
    assert f"{e['followup']['flash']['256']['median_ttft_ms']:,.1f}" in page
    assert f"{doc['steps']['canary']['speed']['candidate']['median_tok_s']:,.2f}" in page
    assert "No profiled breakdown: skipped: the emulator has no profiler." in page
    rec = index.read_record(tmp_path / "reports" / "03_canary_ab.html")
    assert rec["real_server"]["emulated"] is True and rec["gate_pass"] is False
    decision = next(f for f in rec["findings"] if f["id"] == "decision")
    assert decision["status"] == "open" and decision["text"].startswith("only emulated endpoints")
    assert "the newest real-server file is an EMULATED run" in verdict_text(tmp_path)
    assert "Not shown yet: canary on a live service" in verdict_text(tmp_path)


def test_a_gpu_run_renders_as_the_real_server_with_its_breakdown(tmp_path, fixture_dir, cli):
    doc = as_gpu_run(emulated_doc())
    d = write(tmp_path / "data", fixture_dir, doc)
    assert cli(tmp_path, "phase3", *SMOKE, "-p", "data_dir", str(d)) == 0
    page = page_text(tmp_path)
    assert f"Real SGLang server canary: {REAL_LABEL}{ON}" in page
    for part in ("the canary's gates", "decode speed per arm", "a planted verify fault", "promote",
                 "where the flash arm's step goes", "follow-up turns and the prompt's prefill", "server arguments"):
        assert f"Real server: {part}" in page, part
    assert "EMULATED real-server run" not in page and "EMULATED, not a real server" not in page
    c4 = doc["breakdowns"]["4"]["classified"]
    assert f"4 target layers, flash arm: a {c4['step_ms']:,.1f} ms step" in page
    assert "Per-layer slope: least-squares line over the breakdowns at 4, 16 layers (computed here" in page
    assert f"{doc['slopes']['fits']['step_ms']['per_layer_ms']:,.3f}" in page
    assert "Caught by the numerics gate" in page and "k3rn3lh45h" in page and "c0ffee1" in page
    pre = doc["extend_over_prefix"]["prefill"]["flash"]
    assert f"{pre['prefill_ms_per_layer'] / 1000:,.3f}" in page
    rec = index.read_record(tmp_path / "reports" / "03_canary_ab.html")
    assert rec["real_server"] == {"file": "real-server-0.json", "emulated": False, "label": REAL_LABEL + ON,
                                  "date": "2026-12-05T10:00:00Z", "gpu": "NVIDIA H200", "layers": 4,
                                  "decision": rec["findings"][0]["text"],
                                  "parts": {"planted": "real-server-0.json", "promote": "real-server-0.json",
                                            "breakdowns": {"4": "real-server-0.json", "16": "real-server-0.json"}}}
    assert rec["gate_pass"] is False            # this page's own A/B still ran on emulators
    ids = [f["id"] for f in rec["findings"]]
    assert ids[:4] == ["decision", "ratio", "planted", "extend"] and "emulated-ratio" in ids
    verdict = verdict_text(tmp_path)
    assert f"PASS on a {REAL_LABEL}{ON} (2026-12-05, real-server-0.json)" in verdict
    assert "real-server-canary" in verdict and "NVIDIA H200" in verdict
    # every link from the index to this page lands on an anchor of it; no table header is code
    html = (tmp_path / "reports" / "03_canary_ab.html").read_text()
    links = re.findall(r'href="03_canary_ab\.html#([a-z-]+)"', (tmp_path / "reports" / "index.html").read_text())
    assert {"real-server", "real-speed", "real-planted", "real-extend"} <= set(links)
    assert all(f'id="{a}"' in html for a in links), links
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", html)
    assert not [h for h in heads if re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)+", h.strip())]


def test_without_a_real_server_file_the_section_says_so(tmp_path, fixture_dir, cli):
    assert cli(tmp_path, "phase3", *SMOKE, "-p", "data_dir", str(fixture_dir)) == 0
    page = page_text(tmp_path)
    assert "Real SGLang server canary: none recorded" in page and "No real-server run in" in page
    assert "Real server:" not in page and "EMULATED real-server run" not in page
    rec = index.read_record(tmp_path / "reports" / "03_canary_ab.html")
    assert rec["real_server"] is None
    assert "only emulated endpoints" in verdict_text(tmp_path)
    assert "no real-server run in the data" in verdict_text(tmp_path)


def test_what_sglang_still_runs_and_cache_hits_are_judged_from_the_json(tmp_path, fixture_dir, cli):
    """As the H200 run wrote them: EAGLE's radix cache holds the prompt less its last token
    (184,999 of 185,000, stored as a miss by the job's old exact rule), and SGLang's own attention
    in the draft extend is most of the step."""
    doc = as_gpu_run(emulated_doc())
    ctx = doc["extend_over_prefix"]["context_tokens"]
    for arm in doc["extend_over_prefix"]["followup"].values():
        for row in arm.values():
            row.update(cached_tokens=[ctx - 1] * len(row["cached_tokens"]), prefix_hit=False)
    c4 = doc["breakdowns"]["4"]["classified"]
    c4["phases"]["draft_extend"] = {"ms_per_step": 0.9 * c4["step_ms"], "attention_ms_per_step": 0.8 * c4["step_ms"],
                                    "other_ms_per_step": 0.1 * c4["step_ms"], "ours_ms_per_step": 0.0,
                                    "kernels_per_step": 159.0, "attention_kernels_per_step": 1.0}
    d = write(tmp_path / "data", fixture_dir, doc)
    assert cli(tmp_path, "phase3", *SMOKE, "-p", "data_dir", str(d)) == 0
    page = page_text(tmp_path)
    assert f"{0.8 * c4['step_ms']:,.2f} ms of the {c4['step_ms']:,.1f} ms step is SGLang's attention in the " \
           "draft_extend phase (80%)" in page
    assert "MLA_VERIFY_DRAFT_EXTEND=0 leaves it to SGLang" in page
    assert "This run had it on ( real-server-0.json recorded draft_extend True); 0.00 ms of it was the kernel's" in page
    table = page.split("every one hit the cached prompt", 1)[1].split("Greedy tokens", 1)[0]
    assert " yes " in table and " no " not in table


def test_the_label_says_what_the_flash_arm_did_with_eagles_draft_extend(tmp_path):
    """The job records "draft_extend"; a file written before it is on only with
    MLA_VERIFY_DRAFT_EXTEND=1 in its plugin_env (the default was off then); DFLASH has no EAGLE
    draft extend and its label says nothing of it."""
    plain = as_gpu_run(emulated_doc())
    assert findings.real_label(dict(plain, draft_extend=True)) == REAL_LABEL + ON
    assert findings.real_label(dict(plain, draft_extend=False, plugin_env={})) == REAL_LABEL + OFF
    legacy = {k: v for k, v in plain.items() if k not in ("draft_extend", "plugin_env", "algorithm", "block_size")}
    assert findings.real_label(legacy) == REAL_LABEL + OFF
    assert findings.real_label(dict(legacy, plugin_env={"MLA_VERIFY_DRAFT_EXTEND": "1"})) == REAL_LABEL + ON
    assert findings.real_label(dict(legacy, plugin_env={"MLA_VERIFY_DRAFT_EXTEND": "0"})) == REAL_LABEL + OFF
    dflash = dict(plain, algorithm="DFLASH", block_size=16)
    assert findings.real_label(dflash) == REAL_LABEL + ", DFLASH speculative decoding (block 16, tiny DFlash draft)"
    assert data.real_config(dflash)[4] is None and data.real_config(legacy)[4] is False
    assert findings.live_canary(_loaded(legacy, tmp_path), "unused")["text"].startswith(f"PASS on a {REAL_LABEL}{OFF}")


# -- several files: each part from the file that holds it ---------------------------------------
def part_doc(date: str, *, draft: bool | None, layers: int = 4, steps=("setup", "up", "canary", "breakdown"),
             breakdowns=(4,), step_us: int = 10000, kernel: str = "k3rn3lh45h") -> dict:
    """A GPU run's file as one device call writes it: `steps` of those the emulated run has, its
    breakdowns at `breakdowns` layer counts (step_us tells files apart), the draft extend recorded
    (True/False) or, for None, a file from before the job recorded it (no plugin_env: off)."""
    d = as_gpu_run(emulated_doc())
    d.update(date=date, layers=layers, kernel={"hash": kernel, "prebuilt": True})
    d["label"] = d["label"].replace("4-layer", f"{layers}-layer")
    d["steps"] = {n: dict(d["steps"].get(n) or d["steps"]["breakdown"], layers=layers) for n in steps}
    if draft is None:
        for k in ("draft_extend", "plugin_env", "algorithm", "block_size"):
            d.pop(k, None)
    else:
        d.update(draft_extend=draft, plugin_env={})
    by = {n: classify(trace(n, step_us=step_us), n) for n in breakdowns}
    d["breakdowns"] = {str(n): {**d["breakdowns"]["4"], "classified": c} for n, c in by.items()}
    d["slopes"] = slopes(by)
    if "canary" not in steps:
        d["extend_over_prefix"] = None
    return d


def two_configurations() -> list[dict]:
    """As reports/data holds them: an older run with draft extend off (before the key) that planted
    a fault, canaried, promoted and profiled 4 layers; then the default with it on: canary and 4
    layers, a breakdown-only call at 16, one at 61 carrying 4 and 16 from its machine; besides
    them a newer off-run at 16 layers and a run of another kernel at 8, neither to be merged."""
    return [
        part_doc("2026-12-02T05:52:07Z", draft=None, steps=("setup", "up", "planted", "canary", "promote", "breakdown"),
                 step_us=30000),                                                             # 0
        part_doc("2026-12-02T07:57:39Z", draft=True, step_us=11000),                         # 1: the canary run
        part_doc("2026-12-02T08:02:40Z", draft=True, layers=16, steps=("setup", "breakdown"),
                 breakdowns=(4, 16), step_us=12000),                                         # 2
        part_doc("2026-12-02T08:06:49Z", draft=True, layers=61, steps=("setup", "breakdown"),
                 breakdowns=(4, 16, 61), step_us=13000),                                     # 3
        part_doc("2026-12-02T09:00:00Z", draft=False, layers=16, steps=("setup", "breakdown"),
                 breakdowns=(16,), step_us=40000),                                           # 4: off, not merged
        part_doc("2026-12-02T09:10:00Z", draft=True, layers=8, steps=("setup", "breakdown"),
                 breakdowns=(8,), step_us=50000, kernel="0th3rk3rn3l"),                      # 5: another kernel
    ]


def test_each_part_comes_from_the_file_that_holds_it(tmp_path, fixture_dir):
    docs = two_configurations()
    d = write(tmp_path / "data", fixture_dir, *docs)
    real = data.real_server(d, allow_fixture=True)
    name = lambda doc: Path(doc["_path"]).name   # noqa: E731
    assert name(real) == "real-server-1.json"            # newest with a canary, not the newest file
    assert name(real["_planted_doc"]) == name(real["_promote_doc"]) == "real-server-0.json"
    # per layer count the file that measured it itself, never the off-run's 16 or the other kernel's 8
    assert {n: name(m["doc"]) for n, m in real["_breakdowns"].items()} == {
        4: "real-server-1.json", 16: "real-server-2.json", 61: "real-server-3.json"}
    assert real["_breakdowns"][16]["breakdown"]["classified"] == docs[2]["breakdowns"]["16"]["classified"]
    want = slopes({n: docs[i]["breakdowns"][str(n)]["classified"] for n, i in ((4, 1), (16, 2), (61, 3))})
    assert real["_slopes"] == json.loads(json.dumps(want)) or real["_slopes"] == want
    assert real["_slopes"]["layers"] == [4, 16, 61] and not real["_slopes_recorded"]
    assert [name(f) for f in real["_files"]] == [f"real-server-{i}.json" for i in (1, 0, 2, 3, 5, 4)]
    assert [name(f) for f in real["_canaries"]] == ["real-server-1.json", "real-server-0.json"]
    # the other configurations' own breakdowns, newest first, beside (never in) the merged ones
    assert [(name(o["doc"]), o["layers"]) for o in real["_other_breakdowns"]] == [
        ("real-server-5.json", 8), ("real-server-4.json", 16), ("real-server-0.json", 4)]
    line = findings.live_canary(real, "unused")
    assert line["status"] == "pass", line
    assert line["text"].startswith(f"PASS on a {REAL_LABEL}{ON} (2026-12-02, real-server-1.json): canary passed")
    assert ("rolled back at the numerics gate (from real-server-0.json, run with EAGLE's draft extend off, left "
            "to SGLang)") in line["text"]
    assert "promote" not in line["text"]                 # another run's promote says nothing of this canary
    assert findings.planted(real)["text"].endswith(f"on the {REAL_LABEL}{OFF} (2026-12-02, real-server-0.json)")
    # without any planted step: INCOMPLETE, saying none has one
    for doc in docs:
        doc["steps"].pop("planted", None)
    d2 = write(tmp_path / "data2", fixture_dir, *docs)
    line = findings.live_canary(data.real_server(d2, allow_fixture=True), "unused")
    assert line["status"] == "open" and line["text"].startswith("INCOMPLETE on a")
    assert "not run: planted fault (no real-server file has one)" in line["text"]


def test_a_recorded_slope_over_more_layer_counts_wins_and_is_named(tmp_path, fixture_dir):
    """A breakdown-only file whose slope came in through --prior from a file not in the data: its
    recorded slope covers more layer counts than the merged breakdowns can."""
    canary = part_doc("2026-12-02T07:57:39Z", draft=True)
    l61 = part_doc("2026-12-02T08:06:49Z", draft=True, layers=61, steps=("setup", "breakdown"), breakdowns=(61,))
    l61["slopes"] = slopes({n: classify(trace(n), n) for n in (4, 16, 61)})
    real = data.real_server(write(tmp_path / "data", fixture_dir, canary, l61), allow_fixture=True)
    assert real["_slopes"]["layers"] == [4, 16, 61] and real["_slopes_recorded"]
    assert [Path(f["_path"]).name for f in real["_slopes_docs"]] == ["real-server-1.json"]


def test_a_page_of_two_configurations_names_each_file(tmp_path, fixture_dir, cli):
    docs = two_configurations()
    d = write(tmp_path / "data", fixture_dir, *docs)
    assert cli(tmp_path, "phase3", *SMOKE, "-p", "data_dir", str(d)) == 0
    page = page_text(tmp_path)
    assert f"Real SGLang server canary: {REAL_LABEL}{ON}" in page
    assert "Real server: the canary's gates ¶ From real-server-1.json ." in page
    assert ("Real server: a planted verify fault ¶ From real-server-0.json (EAGLE's draft extend off, left to "
            "SGLang).") in page
    assert "this is the newest run that did, real-server-0.json (2026-12-02T05:52:07Z), run with EAGLE's draft " \
           "extend off, left to SGLang , not the canary run's configuration" in page
    assert ("Real server: where the flash arm's step goes ¶ From real-server-1.json , real-server-2.json , "
            "real-server-3.json .") in page
    for n, i in ((4, 1), (16, 2), (61, 3)):
        c = docs[i]["breakdowns"][str(n)]["classified"]
        assert f"{n} target layers, flash arm: a {c['step_ms']:,.1f} ms step" in page
        assert f"ms per layer); from real-server-{i}.json" in page
    merged_part = page[page.index("Real server: where the flash arm's step goes"):
                       page.index("Real server: other configurations' steps")]
    assert "8 target layers" not in merged_part          # another kernel's breakdown
    assert f"{docs[4]['breakdowns']['16']['classified']['step_ms']:,.1f} ms step" not in merged_part
    assert "Per-layer slope: least-squares line over the breakdowns at 4, 16, 61 layers (computed here" in page
    assert "ANOTHER: EAGLE's draft extend off, left to SGLang" in page     # the files table
    for i in (0, 1, 2, 3):
        assert f"real-server-{i}.json" in page
    # the off-run's 16 and the other kernel's 8: in the other configurations' table, not the merged part
    others = page[page.index("Real server: other configurations' steps"):]
    assert "real-server-4.json" not in merged_part and "real-server-5.json" not in merged_part
    for i, n in ((5, 8), (4, 16)):
        assert f"real-server-{i}.json" in others
        assert f"{docs[i]['breakdowns'][str(n)]['classified']['step_ms']:,.2f}" in others
    rec = index.read_record(tmp_path / "reports" / "03_canary_ab.html")
    assert {s["file"] for s in rec["sources"]} >= {f"real-server-{i}.json" for i in (0, 1, 2, 3)}
    assert rec["real_server"]["parts"] == {"planted": "real-server-0.json", "promote": "real-server-0.json",
                                           "breakdowns": {"4": "real-server-1.json", "16": "real-server-2.json",
                                                          "61": "real-server-3.json"}}
    # one line per configuration's newest canary, the section's own first
    assert "Real server: every configuration's newest canary" in page
    rows = page[page.index("every configuration's newest canary"):]
    assert rows.index("real-server-1.json") < rows.index("real-server-0.json")
    for i in (0, 1):
        assert f"{docs[i]['steps']['canary']['speed']['candidate']['median_tok_s']:,.2f}" in rows
    verdict = verdict_text(tmp_path)
    assert f"PASS on a {REAL_LABEL}{ON} (2026-12-02, real-server-1.json)" in verdict
    assert "(from real-server-0.json, run with EAGLE's draft extend off, left to SGLang)" in verdict


def test_a_newer_dflash_canary_is_shown_and_keeps_each_eagle_canary_listed(tmp_path, fixture_dir):
    """As reports/data holds them since the first DFLASH canary: the newest canary (DFLASH) is the
    section's run; the EAGLE canaries of both draft-extend configurations stay in _canaries (and
    _files), newest first, and a canary-less DFLASH file is in neither."""
    docs = two_configurations()
    dflash = part_doc("2026-12-02T15:31:30Z", draft=True, step_us=14000)
    dflash.update(algorithm="DFLASH", block_size=16)
    dflash.pop("draft_extend")
    dflash["steps"]["canary"] = copy.deepcopy(dflash["steps"]["canary"])
    dflash["steps"]["canary"]["speed"]["candidate"]["median_tok_s"] = 70.5
    up_only = part_doc("2026-12-02T13:48:42Z", draft=True, steps=("setup", "up"))
    up_only.update(algorithm="DFLASH", block_size=16)
    up_only.pop("draft_extend")
    real = data.real_server(write(tmp_path / "data", fixture_dir, *docs, dflash, up_only), allow_fixture=True)
    name = lambda doc: Path(doc["_path"]).name   # noqa: E731
    assert name(real) == "real-server-6.json" and real["algorithm"] == "DFLASH"
    assert [name(d) for d in real["_canaries"]] == ["real-server-6.json", "real-server-1.json", "real-server-0.json"]
    assert {"real-server-1.json", "real-server-0.json"} <= {name(d) for d in real["_files"]}
    assert "real-server-7.json" not in {name(d) for d in real["_files"]}
    # the planted fault and promote come from the EAGLE run that has them, named as another configuration
    assert name(real["_planted_doc"]) == "real-server-0.json"
    assert findings.config_words(real["_canaries"][1], real).startswith("EAGLE")


def test_a_breakdown_only_newest_file_does_not_hide_the_canary(tmp_path, fixture_dir):
    canary = part_doc("2026-12-02T07:57:39Z", draft=True)
    newest = part_doc("2026-12-03T00:00:00Z", draft=True, layers=16, steps=("setup", "breakdown"), breakdowns=(16,))
    real = data.real_server(write(tmp_path / "data", fixture_dir, canary, newest), allow_fixture=True)
    assert Path(real["_path"]).name == "real-server-0.json" and real["_planted_doc"] is None
    assert sorted(real["_breakdowns"]) == [4, 16]
    assert findings.live_canary(real, "unused")["status"] == "open"
    # with no canary anywhere, the newest real file is shown and says so
    real = data.real_server(write(tmp_path / "data2", fixture_dir, newest), allow_fixture=True)
    assert findings.live_canary(real, "unused")["text"].endswith("not run: canary, planted fault (no real-server "
                                                                  "file has one)")


def test_an_fp8_runs_parts_are_never_a_bf16_runs(tmp_path, fixture_dir):
    """The job's --kv-cache-dtype fp8_e4m3 records "kv_cache_dtype"; a file without it (every run
    before the option) served auto, the bf16 pool. An fp8 run is another configuration: its
    breakdowns are not merged into a bf16 canary's, its canary is listed on its own, and the
    words name the pool where it differs."""
    bf16 = part_doc("2026-12-02T07:57:39Z", draft=True, step_us=11000)
    legacy = {k: v for k, v in bf16.items() if k != "kv_cache_dtype"}
    assert "kv_cache_dtype" not in legacy
    assert data.real_config(legacy) == data.real_config(dict(bf16, kv_cache_dtype="auto"))
    assert data.real_config(legacy)[4] is True and data.real_config(legacy)[-1] == "auto"
    fp8_16 = dict(part_doc("2026-12-02T09:00:00Z", draft=True, layers=16, steps=("setup", "breakdown"),
                           breakdowns=(4, 16), step_us=60000), kv_cache_dtype="fp8_e4m3")
    fp8_canary = dict(part_doc("2026-12-02T08:30:00Z", draft=True, step_us=70000), kv_cache_dtype="fp8_e4m3")
    assert data.real_config(fp8_16) != data.real_config(legacy)
    assert data.real_config(fp8_16) == data.real_config(fp8_canary)
    # the newest canary is the fp8 one: its parts are fp8 files', the bf16 canary listed beside it
    real = data.real_server(write(tmp_path / "data", fixture_dir, legacy, fp8_16, fp8_canary), allow_fixture=True)
    name = lambda doc: Path(doc["_path"]).name   # noqa: E731
    assert name(real) == "real-server-2.json"
    assert {n: name(m["doc"]) for n, m in real["_breakdowns"].items()} == {4: "real-server-2.json",
                                                                          16: "real-server-1.json"}
    assert [name(d) for d in real["_canaries"]] == ["real-server-2.json", "real-server-0.json"]
    assert [(name(o["doc"]), o["layers"]) for o in real["_other_breakdowns"]] == [("real-server-0.json", 4)]
    # a bf16 run alone: its 4 layers only, the fp8 file's 4 and 16 never merged in
    real = data.real_server(write(tmp_path / "data2", fixture_dir, legacy, fp8_16), allow_fixture=True)
    assert name(real) == "real-server-0.json" and sorted(real["_breakdowns"]) == [4]
    assert real["_breakdowns"][4]["doc"] is real
    assert [(name(o["doc"]), o["layers"]) for o in real["_other_breakdowns"]] == [("real-server-1.json", 16)]
    assert findings.config_words(fp8_16, legacy) == "fp8_e4m3 KV pool"
    assert findings.config_words(legacy, fp8_16) == "bf16 KV pool (--kv-cache-dtype auto)"
    assert findings.config_words(fp8_16).endswith(", kernel k3rn3lh45h, fp8_e4m3 KV pool")
    assert "KV pool" not in findings.config_words(legacy)          # alone, bf16 goes unsaid as it always did
    assert findings.from_file(real["_other_breakdowns"][0]["doc"], real) == \
        "from real-server-1.json, run with fp8_e4m3 KV pool"
    assert findings.real_label(fp8_16) == REAL_LABEL.replace("4-layer", "16-layer") + ON + ", fp8_e4m3 KV pool"
    assert findings.real_label(legacy) == REAL_LABEL + ON
