"""kernel/bench/env.py on the CPU: the result files' names, which every committed file in
reports/data follows, and writing one."""
import json

from kernel.bench import env

INFO = {"date": "2026-12-03T13:18:56+00:00", "gpu": "NVIDIA H200"}


def test_file_name_is_kind_gpu_and_utc_minute():
    assert env.file_name("bench", INFO) == "bench-h200-20261203T1318.json"
    assert env.file_name("overlap-fp8", dict(INFO, gpu="NVIDIA RTX PRO 6000")) == "overlap-fp8-6000-20261203T1318.json"
    # the H100's last word names its memory, not the card
    assert env.file_name("micro", dict(INFO, gpu="NVIDIA H100 80GB HBM3")) == "micro-h100-20261203T1318.json"


def test_write_json_creates_the_folder_and_round_trips(tmp_path):
    path = env.write_json(tmp_path / "new" / "dir", "clocks", dict(INFO, rows=[1, 2]))
    assert path == tmp_path / "new" / "dir" / "clocks-h200-20261203T1318.json"
    assert json.loads(path.read_text())["rows"] == [1, 2]


def test_write_json_names_the_file_from_info_when_given(tmp_path):
    # gpu_run names every file of a run from the run's env_info, whatever date a stage's doc carries
    path = env.write_json(tmp_path, "micro", {"date": "2026-12-04T00:00:00+00:00", "gpu": "x"}, INFO)
    assert path.name == "micro-h200-20261203T1318.json"


def test_no_gpu_names_the_program_on_a_machine_without_cuda(capsys, monkeypatch):
    monkeypatch.setattr(env.torch.cuda, "is_available", lambda: False)
    assert env.no_gpu("kernel.bench.trace") is True
    assert "no CUDA device: kernel.bench.trace measures on a GPU" in capsys.readouterr().err
    monkeypatch.setattr(env.torch.cuda, "is_available", lambda: True)
    assert env.no_gpu("kernel.bench.trace") is False
    assert capsys.readouterr().err == ""


def test_record_puts_the_result_under_env_info_and_writes_it(tmp_path, monkeypatch):
    # env_info reads the GPU; the record only has to merge its fields with the result and name the file
    monkeypatch.setattr(env, "env_info", lambda commit: dict(INFO, commit=commit))
    monkeypatch.setattr(env, "git_commit", lambda: "abc1234")
    doc = env.record(tmp_path, "trace", None, {"rows": [3]})
    assert doc == dict(INFO, commit="abc1234", rows=[3])
    assert json.loads((tmp_path / "trace-h200-20261203T1318.json").read_text()) == doc
    assert env.record(tmp_path, "trace", "def5678", {})["commit"] == "def5678"


def test_a_second_run_of_the_same_minute_keeps_the_first_ones_file(tmp_path, monkeypatch):
    # two overlap runs of one minute once wrote one name, and the second's file replaced the first's
    monkeypatch.setattr(env, "env_info", lambda commit: dict(INFO, commit=commit))
    for rows in ([1], [2], [3]):
        env.record(tmp_path, "overlap", "abc1234", {"rows": rows})
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["overlap-h200-20261203T1318-2.json", "overlap-h200-20261203T1318-3.json",
                     "overlap-h200-20261203T1318.json"]
    assert json.loads((tmp_path / "overlap-h200-20261203T1318.json").read_text())["rows"] == [1]
    # gpu_run rewrites its own file as a stage's rows come in: without keep, the same name again
    for rows in ([4], [5]):
        env.write_json(tmp_path, "bench", dict(INFO, rows=rows))
    assert json.loads((tmp_path / "bench-h200-20261203T1318.json").read_text())["rows"] == [5]
    assert not (tmp_path / "bench-h200-20261203T1318-2.json").exists()
