"""The real-server job with `--kv-cache-dtype fp8_e4m3`: the runtime inventory (the flag in
[launch] extra_args, both arms, its own ports), SGLang 0.5.23's parser reading that command line,
and the job end to end against rollout's emulator (setup, up, canary, breakdown, down: the flag
on every server's command line, the KV pool each server reports, the merged JSON and its file
names, the root that serves one KV dtype, and a server that reports another pool than asked)."""
import json
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from ports import free_ports
from real_server_helpers import sglang_parsed, stop_all

from kernel.sglang.real_server import environment as envmod
from rollout.inventory import load
from rollout.launchers import make_launcher

ROOT = Path(__file__).resolve().parents[2]
GATES = ["--gate", "context_tokens=16384", "--gate", "max_new_tokens=16", "--gate", "numerics_prompts=2"]
FP8 = ["--kv-cache-dtype", "fp8_e4m3"]


def job(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "kernel.sglang.real_server", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def commands(root) -> list[str]:
    """Every server command line the rollout tool started under `root` (its audit log)."""
    audit = (root / "rollout-state" / "audit.jsonl").read_text().splitlines()
    return [a["command"] for a in map(json.loads, audit) if a.get("command")]


# -- the runtime inventory ----------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", envmod.ALGORITHMS)
def test_fp8_puts_the_flag_on_both_arms_and_moves_the_ports(tmp_path, algorithm):
    paths = envmod.Paths(tmp_path / "root")
    example = tomllib.loads(envmod.EXAMPLES[algorithm].read_text())
    inv = load(envmod.write_inventory(paths, envmod.runtime_inventory(paths, 4, algorithm=algorithm,
                                                                      kv_cache_dtype="fp8_e4m3")))
    assert inv.launch["extra_args"] == example["launch"]["extra_args"] + ["--kv-cache-dtype", "fp8_e4m3"]
    assert [g.port for g in inv.groups] == [g["port"] + envmod.FP8_PORT_SHIFT for g in example["group"]]
    for g in inv.groups:
        for arm in ("triton", "flash"):      # the arm is the environment; the pool is on the command line
            line = make_launcher(g, inv).describe_start(arm)
            assert line.count(" --kv-cache-dtype ") == 1 and " --kv-cache-dtype fp8_e4m3" in line, line
            assert f"MLA_VERIFY_BACKEND={arm}" in line
    assert paths.inventory.read_text().splitlines()[0].endswith(
        "with --kv-cache-dtype fp8_e4m3 in [launch] extra_args")
    # auto is the launch as measured: no flag, the example's ports
    auto = envmod.runtime_inventory(paths, 4, algorithm=algorithm)
    assert auto["launch"]["extra_args"] == example["launch"]["extra_args"]
    assert [g["port"] for g in auto["group"]] == [g["port"] for g in example["group"]]
    # ports given by hand win over the shift
    given = envmod.runtime_inventory(paths, 4, algorithm=algorithm, kv_cache_dtype="fp8_e4m3", ports=[41001, 41002])
    assert [g["port"] for g in given["group"]] == [41001, 41002]


def test_each_configuration_has_its_own_root_and_ports():
    roots = {(a, kv): envmod.default_root(a, kv) for a in envmod.ALGORITHMS for kv in envmod.KV_DTYPES}
    assert roots == {("EAGLE", "auto"): Path("/tmp/mla-real-server"),
                     ("EAGLE", "fp8_e4m3"): Path("/tmp/mla-real-server-fp8"),
                     ("DFLASH", "auto"): Path("/tmp/mla-real-server-dflash"),
                     ("DFLASH", "fp8_e4m3"): Path("/tmp/mla-real-server-dflash-fp8")}
    ports = [g["port"] for a in envmod.ALGORITHMS for kv in envmod.KV_DTYPES
             for g in envmod.runtime_inventory(envmod.Paths(roots[a, kv]), 4, algorithm=a, kv_cache_dtype=kv)["group"]]
    assert len(ports) == len(set(ports)) == 8, ports       # all four fleets can be up on the card at once
    # the job's --help names the fp8 fleets' ports: these
    from kernel.sglang.real_server import job as jobmod
    fp8 = {a: [g["port"] for g in envmod.runtime_inventory(envmod.Paths(roots[a, "fp8_e4m3"]), 4, algorithm=a,
                                                           kv_cache_dtype="fp8_e4m3")["group"]]
           for a in envmod.ALGORITHMS}
    assert (f"{fp8['EAGLE'][0]}-{fp8['EAGLE'][1]}, DFLASH {fp8['DFLASH'][0]}-{fp8['DFLASH'][1]})"
            in " ".join(jobmod.__doc__.split()))


def test_bad_kv_dtypes_are_named(tmp_path):
    paths = envmod.Paths(tmp_path)
    with pytest.raises(ValueError, match="kv_cache_dtype: expected one of auto, fp8_e4m3, got 'fp8_e5m2'"):
        envmod.runtime_inventory(paths, 4, kv_cache_dtype="fp8_e5m2")
    example = tmp_path / "example.toml"
    raw = tomllib.loads(envmod.EXAMPLE_INVENTORY.read_text())
    raw["launch"]["extra_args"] += ["--kv-cache-dtype", "auto"]
    example.write_text(envmod.dump_toml(raw))
    with pytest.raises(ValueError, match="extra_args set --kv-cache-dtype already"):
        envmod.runtime_inventory(paths, 4, kv_cache_dtype="fp8_e4m3", example=example)
    r = job("--emulate", "0.2", "--root", str(tmp_path / "r"), "--kv-cache-dtype", "fp8_e5m2", timeout=60)
    assert r.returncode == 2 and "--kv-cache-dtype: invalid choice: 'fp8_e5m2'" in r.stderr, r.stderr



def test_sglang_0523_parser_reads_the_fp8_launch(tmp_path):
    paths = envmod.Paths(tmp_path)
    inv = load(envmod.write_inventory(paths, envmod.runtime_inventory(paths, 4, kv_cache_dtype="fp8_e4m3")))
    argv = make_launcher(inv.groups[0], inv).argv("flash")
    assert sglang_parsed(argv[4:], ("kv_cache_dtype", "load_format", "speculative_algorithm", "port")) == {
        "kv_cache_dtype": "fp8_e4m3", "load_format": "dummy", "speculative_algorithm": "EAGLE", "port": 30004}


# -- the job against the emulator -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def fp8_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real-server-fp8")
    root, out, ports = tmp / "root", tmp / "out", free_ports(2)
    try:
        r = job("--emulate", "0.2", *FP8, "--root", str(root), "--out", str(out), "--ports", ",".join(map(str, ports)),
                "--steps", "setup,up,canary,breakdown,down", *GATES, timeout=420)
    finally:
        stop_all(root)
    return r, root, out, ports


def test_fp8_job_asks_both_arms_for_fp8_and_records_it(fp8_run):
    r, root, out, _ = fp8_run
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    (f,) = out.glob("real-server-emulated-fp8-*.json")
    (archive,) = out.glob("real-server-logs-fp8-*.tar.xz")
    assert not [p for p in out.glob("real-server-*") if "-fp8-" not in p.name]
    m = json.loads(f.read_text())
    assert {k: v["status"] for k, v in m["steps"].items()} == {s: "ok" for s in ("setup", "up", "canary", "breakdown",
                                                                               "down")}
    assert m["kv_cache_dtype"] == "fp8_e4m3" and m["label"].endswith(", fp8_e4m3 KV pool")
    assert m["steps"]["setup"]["summary"] == "L=4, EAGLE, fp8_e4m3 KV pool"
    # every server the rollout tool started, control and candidate, got the flag once
    started = commands(root)
    assert {"MLA_VERIFY_BACKEND=triton", "MLA_VERIFY_BACKEND=flash"} <= {w for c in started for w in c.split()}
    assert len(started) >= 3 and all(c.count(" --kv-cache-dtype fp8_e4m3") == 1 for c in started), started
    # and each said so in /server_info: both groups after up and after the canary, the breakdown's server
    for step, key in (("up", "groups"), ("canary", "groups_after")):
        assert {n: g["server_args"]["kv_cache_dtype"] for n, g in m["steps"][step][key].items()} == \
            {"h200-a": "fp8_e4m3", "h200-b": "fp8_e4m3"}, step
    assert m["steps"]["breakdown"]["server_args"]["kv_cache_dtype"] == "fp8_e4m3"
    assert json.loads(envmod.Paths(root).algorithm_file.read_text()) == {
        "algorithm": "EAGLE", "block_size": None, "kv_cache_dtype": "fp8_e4m3"}
    with tarfile.open(archive) as tar:
        inv = tar.extractfile("inventory.toml").read().decode()
    assert '"--kv-cache-dtype", "fp8_e4m3"' in inv
    # the printed start line and table name the pool
    assert "at 4 layers, EAGLE (the model's NextN layer as the draft), fp8_e4m3 KV pool; predicted" in r.stdout
    assert "\nL=4, EAGLE (the model's NextN layer as the draft), fp8_e4m3 KV pool\nstep " in r.stdout


def test_a_root_serves_one_kv_dtype(fp8_run):
    _, root, _, _ = fp8_run
    r = job("--emulate", "0.2", "--root", str(root), "--steps", "setup", timeout=60)
    assert r.returncode == 2 and (f"--root {root}: its servers, state and results are a run's with --kv-cache-dtype "
                                  f"fp8_e4m3; --kv-cache-dtype auto takes its own root (default "
                                  f"/tmp/mla-real-server)") in r.stderr, r.stderr


def test_a_root_from_before_the_option_is_a_bf16_one(tmp_path):
    """A marker written before --kv-cache-dtype has no kv_cache_dtype: that root served auto."""
    paths = envmod.Paths(tmp_path)
    paths.algorithm_file.write_text(json.dumps({"algorithm": "DFLASH", "block_size": 16}))
    assert paths.served() == {"algorithm": "DFLASH", "block_size": 16, "kv_cache_dtype": "auto"}
    r = job("--emulate", "0.2", "--root", str(tmp_path), "--algorithm", "DFLASH", *FP8, "--steps", "setup", timeout=60)
    assert r.returncode == 2 and (f"--root {tmp_path}: its servers, state and results are a run's with "
                                  f"--kv-cache-dtype auto; --kv-cache-dtype fp8_e4m3 takes its own root (default "
                                  f"/tmp/mla-real-server-dflash-fp8)") in r.stderr, r.stderr


def test_a_server_that_reports_another_pool_fails_the_step(fp8_run):
    """The root's inventory edited by hand to lose the flag: the servers start on auto, and up
    (both groups) and breakdown (its own flash server) fail naming what each reported."""
    _, root, _, ports = fp8_run
    paths = envmod.Paths(root)
    raw = tomllib.loads(paths.inventory.read_text())
    raw["launch"]["extra_args"] = [a for a in raw["launch"]["extra_args"] if a not in ("--kv-cache-dtype", "fp8_e4m3")]
    paths.inventory.write_text(envmod.dump_toml(raw))
    out = root.parent / "out-wrong"
    try:
        up = job("--emulate", "0.2", *FP8, "--root", str(root), "--out", str(out), "--steps", "up", timeout=180)
        bd = job("--emulate", "0.2", *FP8, "--root", str(root), "--out", str(out), "--steps", "breakdown", timeout=180)
    finally:
        stop_all(root)
    assert up.returncode == 1, up.stdout[-4000:]
    u = json.loads((paths.step_results(4) / "up.json").read_text())
    assert u["status"] == "failed" and u["summary"] == (
        "after up, --kv-cache-dtype fp8_e4m3 asked for, but /server_info reports kv_cache_dtype 'auto' on h200-a, "
        "'auto' on h200-b"), u["summary"]
    assert bd.returncode == 1, bd.stdout[-4000:]
    b = json.loads((paths.step_results(4) / "breakdown.json").read_text())
    assert b["status"] == "failed" and "the breakdown's flash server: --kv-cache-dtype fp8_e4m3 asked for, but " \
        "/server_info reports kv_cache_dtype 'auto' on http://127.0.0.1:" in b["summary"], b["summary"]
    assert "timed" not in b and b["stopped"] == "drained"      # refused before any timing, its server stopped


@pytest.fixture(scope="module")
def dflash_fp8_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real-server-dflash-fp8")
    root, out, ports = tmp / "root", tmp / "out", free_ports(2)
    try:
        r = job("--emulate", "0.2", "--algorithm", "DFLASH", *FP8, "--root", str(root), "--out", str(out), "--ports",
                ",".join(map(str, ports)), "--steps", "setup,up,down", *GATES)
    finally:
        stop_all(root)
    return r, root, out


def test_dflash_fp8_job_has_both_flags_and_names(dflash_fp8_run):
    r, root, out = dflash_fp8_run
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    (f,) = out.glob("real-server-emulated-dflash-fp8-*.json")
    assert len(list(out.glob("real-server-logs-dflash-fp8-*.tar.xz"))) == 1
    m = json.loads(f.read_text())
    assert (m["algorithm"], m["block_size"], m["kv_cache_dtype"]) == ("DFLASH", 16, "fp8_e4m3")
    assert m["label"].endswith("DFLASH (tiny DFlash draft, block 16), fp8_e4m3 KV pool")
    for c in commands(root):
        assert " --speculative-algorithm DFLASH " in c and c.count(" --kv-cache-dtype fp8_e4m3") == 1, c
    for g in m["steps"]["up"]["groups"].values():
        assert (g["server_args"]["speculative_algorithm"], g["server_args"]["kv_cache_dtype"]) == ("DFLASH", "fp8_e4m3")


def test_phase_3_names_the_fp8_pool(fp8_run):
    from notebooks import data, findings

    (f,) = fp8_run[2].glob("real-server-emulated-fp8-*.json")
    m = json.loads(f.read_text())
    assert findings.real_label(m).endswith(", 4-layer model config, fp8_e4m3 KV pool")
    bf16 = dict(m, kv_cache_dtype="auto")
    assert data.real_config(m) != data.real_config(bf16)
    assert findings.config_words(m, bf16) == "fp8_e4m3 KV pool"


def test_the_documented_fp8_commands_parse_and_fit_a_device_call():
    """README.md and this package's README give the fp8 commands: the job's own parser reads each,
    and a fresh machine's setup, up, canary and breakdown are predicted to fit their --budget."""
    import shlex

    from kernel.sglang.real_server import estimates, job as jobmod

    found = []
    for doc in (ROOT / "README.md", ROOT / "kernel" / "sglang" / "real_server" / "README.md"):
        for line in doc.read_text().replace("`", "\n").splitlines():
            if line.startswith("python3 -m kernel.sglang.real_server") and "--kv-cache-dtype fp8_e4m3" in line:
                found.append(jobmod.parser().parse_args(shlex.split(line)[3:]))
    assert len(found) >= 3 and {a.algorithm for a in found} == {"EAGLE", "DFLASH"}
    for a in found:
        assert a.kv_cache_dtype == "fp8_e4m3" and a.steps == "setup,up,canary,breakdown"
        steps = a.steps.split(",")
        predicted = sum(estimates.step_estimate(s, layers=a.layers, first_start=s in ("setup", "up"))[0] for s in steps)
        assert predicted < a.budget < 600, (predicted, a.budget)


def test_the_pool_check_names_each_server_and_what_it_reported():
    """steps.kv_pool_problem, which up, canary and breakdown apply to /server_info: a server that
    reports no kv_cache_dtype (or could not be asked) fails as one that reports another."""
    from types import SimpleNamespace

    from kernel.sglang.real_server.steps import kv_pool_problem

    fp8, auto = SimpleNamespace(kv_cache_dtype="fp8_e4m3"), SimpleNamespace(kv_cache_dtype="auto")
    assert kv_pool_problem(fp8, {"a": {"kv_cache_dtype": "fp8_e4m3"}, "b": {"kv_cache_dtype": "fp8_e4m3"}}) is None
    assert kv_pool_problem(auto, {"a": {"kv_cache_dtype": "auto"}}) is None
    assert kv_pool_problem(fp8, {"a": {"kv_cache_dtype": "fp8_e4m3"}, "b": {"error": "timed out"}}) == \
        "--kv-cache-dtype fp8_e4m3 asked for, but /server_info reports kv_cache_dtype nothing on b"
    assert kv_pool_problem(auto, {"a": {"kv_cache_dtype": "fp8_e4m3"}}) == \
        "--kv-cache-dtype auto asked for, but /server_info reports kv_cache_dtype 'fp8_e4m3' on a"
