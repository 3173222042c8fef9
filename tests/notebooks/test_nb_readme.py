"""The README's figures are the newest measurement JSON's: each number it quotes is recomputed
here from the file it cites, and that file must be the newest of its kind. New data means the
README is updated in the same change (this test names what to write)."""
from __future__ import annotations

import re
from pathlib import Path

from notebooks import data

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DATA = ROOT / "reports" / "data"


def _one(pattern: str) -> re.Match:
    found = list(re.finditer(pattern, re.sub(r"\s+", " ", README)))
    assert len(found) == 1, f"README should quote this once: {pattern}"
    return found[0]


def test_readme_bandwidth_and_ceiling_are_the_newest_bench_file():
    m = _one(r"reads its KV cache at ([\d.]+) GB/s on an? ([^,]+), where the memory allows "
             r"([\d,]+) GB/s \(`reports/data/([^`]+)`")
    bench = data.newest(DATA, "bench")
    assert m.group(4) == Path(bench["_path"]).name, f"cite the newest bench file {bench['_path']}"
    df = data.bench_frame(bench)
    base = data.centre(df).set_index("impl").loc[data.BASELINE]
    read_gbps, _ = data.ceilings(bench)
    assert m.group(1) == f"{base['GBps']:.1f}"
    assert m.group(3) == f"{read_gbps:,.0f}"
    assert m.group(2) == bench["gpu"]


def test_readme_case_count_is_the_newest_validation_file():
    m = _one(r"(\d+) random cases plus the extremes: (\d+) cases in `reports/data/([^`]+)`")
    val = data.newest(DATA, "validation")
    assert m.group(3) == Path(val["_path"]).name, f"cite the newest validation file {val['_path']}"
    assert int(m.group(2)) == val["n_cases"] == len(val["cases"])
    default = re.search(r'"--cases", type=int, default=(\d+)', (ROOT / "kernel" / "gpu_run.py")
                        .read_text())
    assert default and m.group(1) == default.group(1), "kernel.gpu_run's --cases default"


def test_readme_real_server_speed_is_the_canary_phase_3_shows():
    m = _one(r"the flash arm decoded ([\d.]+) tokens/s against ([\d.]+) on SGLang's triton path, ([\d.]+) "
             r"against ([\d.]+) ms a step \(`reports/data/([^`]+)`")
    doc = data.real_server(DATA)
    assert doc is not None and not doc.get("emulated"), "no real-server canary in reports/data"
    assert m.group(5) == Path(doc["_path"]).name, f"cite the canary phase 3 shows: {doc['_path']}"
    speed = doc["steps"]["canary"]["speed"]
    cand, ctrl = speed["candidate"], speed["control"]
    assert m.group(1) == f"{cand['median_tok_s']:.1f}" and m.group(2) == f"{ctrl['median_tok_s']:.1f}"
    assert m.group(3) == f"{cand['median_step_ms']:.1f}" and m.group(4) == f"{ctrl['median_step_ms']:.1f}"
    assert f"{doc['layers']}-layer" in README and speed["passed"] is True
    algo = doc.get("algorithm") or "EAGLE"
    setting = _one(r"rank's attention, ([A-Z]+)([^)]*), 185,000 tokens")
    assert algo in setting.group(1)
    pool = data.real_kv_cache_dtype(doc)
    assert (f"{pool} KV pool" in setting.group(2)) == (pool != "auto"), f"say the run's KV pool: {pool}"


def test_readme_second_speed_is_the_other_algorithms_canary_phase_3_lists():
    """The second figure: the newest canary of the other speculative algorithm (EAGLE beside a
    DFLASH headline, or DFLASH beside an EAGLE one), from phase 3's per-configuration table
    (data.real_server's _canaries, newest first)."""
    m = _one(r"With\s+(EAGLE|DFLASH)\b[^,]* instead, ([\d.]+) against ([\d.]+) tokens/s\s+"
             r"\(`reports/data/([^`]+)`")
    doc = data.real_server(DATA)
    algo = lambda d: d.get("algorithm") or "EAGLE"   # noqa: E731  (the first files predate the field)
    assert m.group(1) != algo(doc), "the second figure is the other algorithm's"
    other = [d for d in doc["_canaries"] if algo(d) == m.group(1)]
    assert other, f"no {m.group(1)} canary in reports/data"
    assert m.group(4) == Path(other[0]["_path"]).name, f"cite the newest {m.group(1)} canary {other[0]['_path']}"
    speed = other[0]["steps"]["canary"]["speed"]
    assert m.group(2) == f"{speed['candidate']['median_tok_s']:.1f}"
    assert m.group(3) == f"{speed['control']['median_tok_s']:.1f}" and speed["passed"] is True
    if algo(doc) == "DFLASH":
        assert f"DFLASH with blocks of {doc['block_size']}" in re.sub(r"\s+", " ", README)


def test_readme_bf16_pool_speeds_are_each_algorithms_newest_bf16_canary():
    """Beside a headline on the fp8 pool, the default (bf16) pool's canaries: for each algorithm the
    newest canary phase 3 lists (_canaries) with kv_cache_dtype auto (absent in older files)."""
    doc = data.real_server(DATA)
    if data.real_kv_cache_dtype(doc) == "auto":
        return   # the headline is itself a bf16 run: nothing more is quoted
    m = _one(r"default bf16 pool the same canaries read ([\d.]+) against ([\d.]+) tokens/s with (EAGLE|DFLASH) "
             r"\(`reports/data/([^`]+)`\) and ([\d.]+) against ([\d.]+) with (EAGLE|DFLASH) \(`reports/data/([^`]+)`")
    for cand, ctrl, algo, name in (m.group(1, 2, 3, 4), m.group(5, 6, 7, 8)):
        bf16 = [d for d in doc["_canaries"] if (d.get("algorithm") or "EAGLE") == algo
                and data.real_kv_cache_dtype(d) == "auto"]
        assert bf16, f"no bf16 {algo} canary in reports/data"
        assert name == Path(bf16[0]["_path"]).name, f"cite the newest bf16 {algo} canary {bf16[0]['_path']}"
        speed = bf16[0]["steps"]["canary"]["speed"]
        assert cand == f"{speed['candidate']['median_tok_s']:.1f}" and ctrl == f"{speed['control']['median_tok_s']:.1f}"
        assert speed["passed"] is True
    assert m.group(3) != m.group(7), "one figure per algorithm"


def test_readme_sink_figures_are_the_newest_sink_check():
    m = _one(r"SGLang's path drops the probabilities of every key 8 nats or more below the sink, ([\d.]+) to ([\d.]+) "
             r"relative error where that tail holds more than half of the mass, where ours stays at ([\d.e-]+) "
             r"or less \(`reports/data/([^`]+)`")
    doc = data.newest(DATA, "sink_check")
    assert m.group(4) == Path(doc["_path"]).name, f"cite the newest sink_check file {doc['_path']}"
    sk = data.sink_frame(doc)
    sg = data.sink_lost(sk)
    assert (m.group(1), m.group(2)) == (f"{sg.min():.2f}", f"{sg.max():.2f}")
    assert float(m.group(3)) == float(f"{sk['ours'].max():.1e}") and doc["all_pass"]
