"""kernel/guarantees.py on the CPU: each check's verdict read from files the GPU runs wrote (and
from the same files broken one way at a time), the side-by-side runner's timeout, the argument
errors."""
import copy
import gzip
import json
import os
import sys
import time
from pathlib import Path

import pytest

from kernel import guarantees as g

DATA = Path(__file__).resolve().parents[1] / "reports" / "data"
VALIDATION = DATA / "validation-h200-20261205T0239.json.gz"
BACKEND = DATA / "sglang-backend-h200-20261205T0239.json"
MEMCHECK = DATA / "rungs" / "sanitize-tiers-memcheck-h100-20261205T1839-pdl-trigger.json"


def _load(p: Path) -> dict:
    return json.loads((gzip.open(p) if p.suffix == ".gz" else open(p)).read())


def test_recorded_runs_pass_each_check():
    ok, line = g.verdict("validation", _load(VALIDATION))
    assert ok and line.startswith("509 bf16 + 506 fp8 + 34 production cases")
    ok, line = g.verdict("sglang-backend", _load(BACKEND))
    assert ok and "2 memcheck replays" in line
    ok, line = g.verdict("sanitize-memcheck", _load(MEMCHECK))
    assert ok and "[1, 2, 4, 6, 8]" in line and "0 errors" in line


@pytest.mark.parametrize("breakage, named", [
    (lambda d: d["fp8"].update(all_pass=False), "fp8"),
    (lambda d: d.update(n_cases=499), "bf16"),
    (lambda d: d["fp8"].pop("graph"), "fp8 graph"),
    (lambda d: d["production"].update(all_pass=False), "production"),
    (lambda d: d.pop("graph"), "graph"),
])
def test_validation_fails_when_any_part_fails_or_runs_short(breakage, named):
    doc = copy.deepcopy(_load(VALIDATION))
    breakage(doc)
    ok, line = g.verdict("validation", doc)
    assert not ok and line.split("failed: ")[1].split(", ").count(named) == 1


def test_backend_fails_without_a_memcheck_replay_or_with_a_failed_case():
    doc = _load(BACKEND)
    no_san = dict(doc, cases=[c for c in doc["cases"] if c["kind"] != "sanitizer"])
    assert not g.verdict("sglang-backend", no_san)[0]
    bad = copy.deepcopy(doc)
    bad["cases"][3]["pass"] = False
    ok, line = g.verdict("sglang-backend", bad)
    assert not ok and "heads64-page64" in line


def test_sanitizer_fails_on_a_dirty_tool_even_when_the_checks_pass():
    doc = copy.deepcopy(_load(MEMCHECK))
    doc["sanitizer"]["clean"] = False
    assert not g.verdict("sanitize-memcheck", doc)[0]
    assert not g.verdict("sanitize-memcheck", dict(_load(MEMCHECK), rows=[]))[0]


def test_result_file_ignores_files_from_before_the_run(tmp_path):
    old = tmp_path / "validation-h200-20261201T0000.json"
    old.write_text("{}")
    os.utime(old, (time.time() - 3600,) * 2)
    assert g.result_file("validation", tmp_path, time.time()) is None
    new = tmp_path / "validation-h200-20261206T0000.json"
    new.write_text("{}")
    assert g.result_file("validation", tmp_path, time.time()) == new
    assert g.result_file("sanitize-synccheck", tmp_path, 0) is None


def test_runner_kills_a_check_past_the_timeout_and_the_summary_says_so(tmp_path):
    write = ("import json, sys; json.dump({'tool': 'memcheck', 'pass': True, 'rows': [{'tier': 8}], "
             "'sanitizer': {'clean': True, 'summary': 'ERROR SUMMARY: 0 errors'}}, "
             f"open({str(tmp_path / 'sanitize-tiers-memcheck.json')!r}, 'w'))")
    cmds = {"sanitize-memcheck": [sys.executable, "-c", write],
            "validation": [sys.executable, "-c", "import time; time.sleep(600)"]}
    said, since = [], time.time()
    runs = g.run_all(cmds, tmp_path / "logs", timeout_s=3, say=said.append)
    assert runs["validation"]["timed_out"] and not runs["sanitize-memcheck"]["timed_out"]
    assert runs["sanitize-memcheck"]["rc"] == 0
    rows = {r["check"]: r for r in g.summarize(runs, tmp_path, since)}
    assert rows["sanitize-memcheck"]["passed"]
    assert not rows["validation"]["passed"] and "timed out" in rows["validation"]["detail"]
    assert any("timed out, killed" in s for s in said)
    assert "FAIL" in g.table(list(rows.values()))


def test_commands_write_into_the_output_folder_with_the_commit():
    out = Path("/x")
    v = g.command("validation", out, "", "abc1234")
    assert v[2:] == ["kernel.gpu_run", "--stages", "validate,graph", "--out", "/x", "--commit", "abc1234"]
    s = g.command("sanitize-synccheck", out, "1,8", "abc1234")
    assert s[2:5] == ["kernel.bench.sanitize_tiers", "--under", "synccheck"] and s[-2:] == ["--tiers", "1,8"]


@pytest.mark.parametrize("argv, named", [
    (["--checks", "validation,memcheck"], "--checks"),
    (["--tiers", "8,x"], "--tiers"),
    (["--timeout", "0"], "--timeout"),
])
def test_bad_arguments_are_named(argv, named, capsys):
    with pytest.raises(SystemExit) as e:
        g.parse(["--out", "/tmp/x"] + argv)
    assert e.value.code == 2 and named in capsys.readouterr().err


def test_without_a_gpu_it_stops_before_starting_anything(tmp_path, capsys):
    assert g.main(["--out", str(tmp_path / "o")]) == 2
    assert "no CUDA device: kernel.guarantees" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_without_sglang_the_checks_that_compare_with_it_stop_with_the_fix(tmp_path, capsys, monkeypatch):
    from kernel.bench import env
    monkeypatch.setattr(env, "no_gpu", lambda *a, **k: False)
    monkeypatch.setitem(sys.modules, "sglang", None)          # import sglang raises ImportError
    assert g.main(["--out", str(tmp_path / "o"), "--checks", "validation,sanitize-memcheck"]) == 2
    err = capsys.readouterr().err
    assert "--checks validation need SGLang importable" in err and "make sglang-bundle" in err
    assert not (tmp_path / "o").exists()


def test_log_tail_gives_the_end_of_a_failed_checks_log(tmp_path):
    log = tmp_path / "validation.log"
    log.write_text("\n".join(f"line {i}" for i in range(40)))
    assert g.log_tail(log, 3) == "line 37\nline 38\nline 39"
    assert g.log_tail(tmp_path / "missing.log") == ""
