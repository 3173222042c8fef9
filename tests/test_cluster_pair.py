"""kernel/bench/cluster_pair.py on the CPU: its modes match cluster_pair.cu's, the build commands name
both archs, a missing nvcc is named, and the committed H100 run's finding: a pair of CTAs that hands
one partial to the other through distributed shared memory costs more than the stores and the merge
reads it saves."""
import json
import re
from pathlib import Path

from kernel.bench import cluster_pair

RUNGS = Path(__file__).resolve().parents[1] / "reports" / "data" / "rungs"
RUN = RUNGS / "cluster-pair-h100-20261206T1511.json"


def test_modes_match_the_probe_source():
    src = cluster_pair.SRC.read_text()
    names = re.search(r"MODE_NAMES\[\] = \{([^}]*)\}", src).group(1)
    assert tuple(re.findall(r'"(\w+)"', names)) == cluster_pair.MODES
    enum = re.search(r"enum Mode \{([^}]*)\}", src).group(1)
    assert [n.split("=")[0].strip().lower() for n in enum.split(",")] == list(cluster_pair.MODES)


def test_build_commands_run_sm90_and_compile_sm120():
    run = cluster_pair.compile_cmd("nvcc", Path("/t/x"), cluster_pair.RUN_ARCH)
    check = cluster_pair.compile_cmd("nvcc", Path("/t/x.cubin"), cluster_pair.CHECK_ARCH, cubin=True)
    assert "-arch=sm_90" in run and "-cubin" not in run and run[-1] == str(cluster_pair.SRC)
    assert "-arch=sm_120" in check and "-cubin" in check


def test_missing_nvcc_is_named(monkeypatch, capsys, tmp_path):
    def missing(name):
        raise cluster_pair.ToolMissing(f"{name} not found")
    monkeypatch.setattr(cluster_pair, "find_tool", missing)
    assert cluster_pair.main(["--out", str(tmp_path)]) == 2
    assert "nvcc not found" in capsys.readouterr().err


def test_costs_and_table_from_the_committed_run():
    doc = json.loads(RUN.read_text())
    assert doc["costs"] == cluster_pair.costs(doc["us_per_launch"])
    lines = cluster_pair.table(doc)
    assert lines[0].startswith("NVIDIA H100") and "pairs held at once 66" in lines[0]
    assert [ln.split()[0] for ln in lines[2:6]] == list(cluster_pair.MODES)


def test_a_pair_costs_more_than_the_partials_it_saves():
    # issue 25's last lever on the 128-row calls (kernel/NOTES.md, twenty-sixth session): pairs fill
    # every SM (66 held at once on 132), and the pair's output is right; but handing the partial over,
    # combining and storing one costs more than every CTA storing its own, by more than the merge
    # would save reading half the partials (half the 2.6 us it spent summing them at 128 rows:
    # rungs/trace-h100-20261206T1444-128-rows.json)
    doc = json.loads(RUN.read_text())
    assert doc["pair_output_ok"] and doc["max_active_clusters"]["2"] * 2 == doc["ctas"] == doc["sms"]
    c = doc["costs"]
    trace = json.loads((RUNGS / "trace-h100-20261206T1444-128-rows.json").read_text())
    fp8_16 = next(r for r in trace["rows"] if (r["kv_dtype"], r["T"]) == ("fp8_e4m3", 16))
    merge_saved = (fp8_16["merge_summed_after_verify_us"] - fp8_16["merge_waited_after_verify_us"]) / 2
    pair = c["pair_handover_combine_store_us"] + c["cluster_launch_and_barrier_us"]
    assert pair > c["store_all_partials_us"] + merge_saved
