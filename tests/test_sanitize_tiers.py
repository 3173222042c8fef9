"""kernel/bench/sanitize_tiers.py on the CPU: its edge cases reach the loaders' edges, and bad
arguments are named before any GPU is looked for; --under records the sanitizer's verdict."""
import json
import subprocess

import pytest

from kernel.bench import sanitize_tiers
from kernel.ops import TIERS


def test_edge_batches_cover_tile_and_pair_edges_and_a_split():
    prefixes = {S for batch, _ in sanitize_tiers.EDGE_BATCHES for S in batch}
    # empty, one row, a tile's last and first rows, a pair's, and past it
    assert {0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65} <= prefixes
    # a prefix long enough that the KV splits (more than one 128-token chunk a request)
    assert max(prefixes) >= 1000
    for batch, drafts in sanitize_tiers.EDGE_BATCHES:
        assert len(batch) == len(drafts) and all(1 <= t <= 17 for t in drafts)


def test_edge_batches_reach_rows64d_tail_row_tiles():
    # a request of two or more 64-row tiles whose last holds <= 32 rows at 8 heads (plan_item's
    # tail, on longer splits of its own when its prefix splits): D = 17 leaves 8, D = 12 leaves 32
    tails = [(S, T) for batch, drafts in sanitize_tiers.EDGE_BATCHES for S, T in zip(batch, drafts)
             if T * 8 > 64 and T * 8 - (T * 8 - 1) // 64 * 64 <= 32]
    assert {T for _, T in tails} >= {17, 12}
    assert any(S >= 1000 for S, T in tails if T == 17)      # split, so the tail's own splits are used


@pytest.mark.parametrize("argv, name", [(["--out", "x", "--pools", "int4"], "--pools"),
                                         (["--out", "x", "--tiers", "3"], "--tiers"),
                                         (["--out", "x", "--tiers", "nine"], "--tiers")])
def test_bad_arguments_name_the_argument_and_value(argv, name, capsys):
    with pytest.raises(SystemExit) as e:
        sanitize_tiers.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert name in err and argv[-1] in err
    assert 3 not in TIERS


def test_sanitizer_verdict_reads_the_tools_summary_and_exit_code():
    race = "========= RACECHECK SUMMARY: 33 hazards displayed (33 errors, 0 warnings)\n"
    v = sanitize_tiers.sanitizer_verdict(3, "table\n" + race)
    assert v == {"returncode": 3, "summary": race.strip("= \n"), "clean": False}
    assert sanitize_tiers.sanitizer_verdict(0, "========= ERROR SUMMARY: 0 errors\n")["clean"]
    # exit 0 without a summary: the tool did not run to its end, so not clean
    assert not sanitize_tiers.sanitizer_verdict(0, "no sanitizer output")["clean"]


def _fake_sanitizer(monkeypatch, tmp_path, returncode, output, write=True, checks_pass=True):
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        if write:
            (tmp_path / "sanitize-tiers-racecheck.json").write_text(json.dumps({"tool": "racecheck", "pass": checks_pass, "rows": []}))
        return subprocess.CompletedProcess(cmd, returncode, stdout=output)

    monkeypatch.setattr(sanitize_tiers.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(sanitize_tiers.subprocess, "run", run)
    return calls


def test_under_records_what_the_sanitizer_found(monkeypatch, tmp_path):
    out = "========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)\n"
    calls = _fake_sanitizer(monkeypatch, tmp_path, 3, out)
    rc = sanitize_tiers.main(["--under", "racecheck", "--tiers", "8", "--pools", "bf16", "--out", str(tmp_path)])
    assert rc == 3
    (cmd,) = calls
    assert cmd[:5] == ["/usr/bin/compute-sanitizer", "--tool", "racecheck", "--error-exitcode", "3"]
    assert "--under" not in cmd and cmd[-2:] == ["--tool", "racecheck"] and "--tiers" in cmd
    doc = json.loads((tmp_path / "sanitize-tiers-racecheck.json").read_text())
    assert doc["pass"] is True and doc["sanitizer"]["clean"] is False
    assert doc["sanitizer"]["summary"].startswith("RACECHECK SUMMARY: 2 hazards")


def test_under_clean_run_and_failed_checks(monkeypatch, tmp_path):
    _fake_sanitizer(monkeypatch, tmp_path, 0, "========= ERROR SUMMARY: 0 errors\n")
    assert sanitize_tiers.main(["--under=racecheck", "--out", str(tmp_path)]) == 0
    _fake_sanitizer(monkeypatch, tmp_path, 0, "========= ERROR SUMMARY: 0 errors\n", checks_pass=False)
    assert sanitize_tiers.main(["--under", "racecheck", "--out", str(tmp_path)]) == 1


def test_under_names_a_child_that_wrote_nothing(monkeypatch, tmp_path, capsys):
    _fake_sanitizer(monkeypatch, tmp_path, 3, "========= ERROR SUMMARY: 1 error\n", write=False)
    assert sanitize_tiers.main(["--under", "racecheck", "--out", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "sanitize-tiers-racecheck.json" in err and "ERROR SUMMARY: 1 error" in err


def test_under_and_tool_together_is_an_error(capsys):
    with pytest.raises(SystemExit) as e:
        sanitize_tiers.main(["--under", "memcheck", "--tool", "memcheck", "--out", "x"])
    assert e.value.code == 2 and "--tool" in capsys.readouterr().err
