"""kernel/bench/race_probe.py on the CPU: racecheck's summary and report read right, the build
names the source and arch, the JSON is assembled from the runs (subprocess faked), and a missing
nvcc or compute-sanitizer is named; the variant list matches race_probe.cu's."""
import json
import re
import subprocess

import pytest

from kernel.bench import race_probe

HAZARD = """========= COMPUTE-SANITIZER
========= Error: Potential RAW hazard detected at __shared__ 0x2290 in block (139,0,0) :
=========     Write Thread (60,0,0) at void body<(int)9>(...)+0x1030 in race_probe.cu:189
=========     Read Thread (226,0,0) at void body<(int)9>(...)+0x1ab0 in race_probe.cu:197
=========     Current Value : 168
========= 
variant uneven ok
========= RACECHECK SUMMARY: 100 hazards displayed (245508 errors, 0 warnings)
"""


def test_summary_counts_hazards_errors_and_warnings():
    s = race_probe.parse_summary(HAZARD)
    assert s == {"summary": "RACECHECK SUMMARY: 100 hazards displayed (245508 errors, 0 warnings)",
                 "hazards": 100, "errors": 245508, "warnings": 0}
    clean = race_probe.parse_summary("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")
    assert (clean["hazards"], clean["errors"], clean["warnings"]) == (0, 0, 0)
    one = race_probe.parse_summary("RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)")
    assert (one["hazards"], one["errors"], one["warnings"]) == (1, 0, 1)
    # the last summary counts (a run that printed two); none at all: every field None
    two = race_probe.parse_summary("RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)\n" + HAZARD)
    assert two["errors"] == 245508
    assert set(race_probe.parse_summary("killed").values()) == {None}


def test_excerpt_keeps_the_report_not_the_banner_summary_or_program_output():
    ex = race_probe.hazard_excerpt(HAZARD)
    assert ex[0].endswith("in block (139,0,0) :") and "Write Thread (60,0,0)" in ex[1] and len(ex) == 4
    assert not any("SUMMARY" in x or "COMPUTE-SANITIZER" in x or "variant" in x for x in ex)
    assert len(race_probe.hazard_excerpt(HAZARD * 30, limit=40)) == 40


def test_compile_command_names_the_source_and_arch(tmp_path):
    cmd = race_probe.compile_cmd("/cuda/bin/nvcc", tmp_path / "race_probe", "sm_90")
    assert cmd[0] == "/cuda/bin/nvcc" and "-arch=sm_90" in cmd and "-lineinfo" in cmd
    assert cmd[-1] == str(race_probe.SRC) and race_probe.SRC.name == "race_probe.cu" and race_probe.SRC.is_file()
    assert cmd[cmd.index("-o") + 1] == str(tmp_path / "race_probe")


def test_variants_match_the_cuda_table():
    src = race_probe.SRC.read_text()
    table = src[src.index("const Variant VARIANTS[]"):]
    table = table[:table.index("};")]
    assert tuple(re.findall(r'\{"(\w+)", probe_(\w+),', table)) == tuple((v, v) for v in race_probe.VARIANTS)
    assert {"plain", "named", "named_split", "cpasync", "full"} <= set(race_probe.VARIANTS)


def test_kernel_racecheck_runs_sanitize_tiers_with_per_hazard_detail(tmp_path):
    cmd = race_probe.kernel_racecheck_cmd("/cs", tmp_path)
    assert cmd[:3] == ["/cs", "--tool", "racecheck"]
    assert cmd[cmd.index("--racecheck-report") + 1] in ("all", "hazard")
    assert cmd[cmd.index("--print-limit") + 1] == "200"
    tail = cmd[cmd.index("-m") + 1:]
    assert tail == ["kernel.bench.sanitize_tiers", "--tiers", "8", "--pools", "bf16", "--out", str(tmp_path / "kernel"),
                    "--tool", "racecheck"]


def _fake_tools(monkeypatch, hazards_in=("uneven",), wrong=()):
    """nvcc, compute-sanitizer, the probe and nvidia-smi as fakes; returns the commands run."""
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        exe = cmd[0]
        if exe.endswith("nvcc"):
            out = "Cuda compilation tools, release 13.0, V13.0.88\n" if "--version" in cmd else ""
            return subprocess.CompletedProcess(cmd, 0, stdout=out)
        if exe == "nvidia-smi":
            return subprocess.CompletedProcess(cmd, 0, stdout="GPU 0: NVIDIA H200 (UUID: GPU-x)\n")
        if exe.endswith("compute-sanitizer"):
            if "kernel.bench.sanitize_tiers" in cmd:
                return subprocess.CompletedProcess(cmd, 3, stdout=HAZARD.replace("variant uneven ok\n", ""))
            name = cmd[-1]
            if name in hazards_in:
                return subprocess.CompletedProcess(cmd, 3, stdout=HAZARD.replace("uneven", name))
            return subprocess.CompletedProcess(cmd, 0, stdout=f"variant {name} ok\n========= RACECHECK SUMMARY: "
                                                              "0 hazards displayed (0 errors, 0 warnings)\n")
        lines = "".join(f"variant {v} {'FAIL' if v in wrong else 'ok'}\n" for v in race_probe.VARIANTS)
        return subprocess.CompletedProcess(cmd, 1 if wrong else 0, stdout="race_probe: seed 1\n" + lines)

    monkeypatch.setattr(race_probe.shutil, "which", lambda name: "/usr/local/cuda/bin/" + name)
    monkeypatch.setattr(race_probe.subprocess, "run", run)
    monkeypatch.setattr(race_probe, "git_commit", lambda: "abc1234")
    return calls


def test_json_assembled_from_the_runs(monkeypatch, tmp_path, capsys):
    calls = _fake_tools(monkeypatch)
    assert race_probe.main(["--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "race-probe.json").read_text())
    assert doc["kind"] == "race_probe" and doc["gpu"] == "NVIDIA H200" and "release 13.0" in doc["nvcc"]
    assert [v["name"] for v in doc["variants"]] == list(race_probe.VARIANTS)
    by = {v["name"]: v for v in doc["variants"]}
    assert by["uneven"]["racecheck_returncode"] == 3 and by["uneven"]["errors"] == 245508
    assert by["uneven"]["output_ok"] is True and by["uneven"]["excerpt"][0].startswith("========= Error: Potential RAW")
    assert by["plain"]["hazards"] == 0 and by["plain"]["racecheck_returncode"] == 0 and by["plain"]["excerpt"] == []
    assert "kernel_racecheck" not in doc
    # each variant under racecheck, by name, with the tool's exit code for hazards
    rc = [c for c in calls if c[0].endswith("compute-sanitizer")]
    assert sorted(c[-1] for c in rc) == sorted(race_probe.VARIANTS)
    assert all(c[c.index("--error-exitcode") + 1] == "3" for c in rc)
    table = capsys.readouterr().out.splitlines()
    assert table[-len(race_probe.VARIANTS):][0].split()[:2] == ["plain", "yes"]


def test_wrong_output_fails_and_kernel_text_is_kept(monkeypatch, tmp_path):
    _fake_tools(monkeypatch, wrong=("full",))
    assert race_probe.main(["--out", str(tmp_path), "--kernel-racecheck"]) == 1
    doc = json.loads((tmp_path / "race-probe.json").read_text())
    assert {v["name"]: v["output_ok"] for v in doc["variants"]}["full"] is False
    assert doc["kernel_racecheck"]["returncode"] == 3 and doc["kernel_racecheck"]["errors"] == 245508
    text = (tmp_path / race_probe.KERNEL_OUT).read_text()
    assert "sanitize_tiers" in text.splitlines()[0] and "Write Thread (60,0,0)" in text


def test_a_timed_out_run_keeps_what_it_printed(monkeypatch):
    def run(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw["timeout"], output=b"========= Error: Potential RAW hazard\n")
    monkeypatch.setattr(race_probe.subprocess, "run", run)
    proc = race_probe._run(["x"], 5)
    assert proc.returncode is None and "Potential RAW" in proc.stdout and "killed after 5 s" in proc.stdout


@pytest.mark.parametrize("missing", ["nvcc", "compute-sanitizer"])
def test_a_missing_tool_is_named(monkeypatch, tmp_path, capsys, missing):
    monkeypatch.setattr(race_probe.shutil, "which", lambda name: None if name == missing else "/bin/" + name)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.setattr(race_probe.os.path, "isfile", lambda p: False)
    assert race_probe.main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{missing} not found on PATH" in err and str(tmp_path / "no-cuda") in err and "/usr/local/cuda/bin" in err
    assert not (tmp_path / "out").exists()


def test_bad_arch_names_the_argument_and_value(capsys):
    with pytest.raises(SystemExit) as e:
        race_probe.main(["--out", "x", "--arch", "90"])
    assert e.value.code == 2 and "--arch" in capsys.readouterr().err


def test_failed_build_is_reported_with_the_source(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(race_probe.shutil, "which", lambda name: "/bin/" + name)
    monkeypatch.setattr(race_probe.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, stdout="race_probe.cu(3): error: x"))
    assert race_probe.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "nvcc failed (exit 1)" in err and "race_probe.cu" in err and "sm_90" in err
