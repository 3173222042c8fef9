"""Which arm a server runs can be read from outside it: the plugin's Prometheus series, written
by rank processes through prometheus_client's real multiprocess machinery as SGLang sets it up
(`set_prometheus_multiproc_dir` before the ranks start, `add_prometheus_middleware` serving
/metrics), read back by `rollout.arm.arm_from_metrics`, the one reader the rollout tool and
the reports use. Dead ranks stop counting."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sglang.srt.utils import common as sglang_common
from starlette.applications import Starlette
from starlette.testclient import TestClient

from kernel import build
from rollout.arm import INFO, arm_from_metrics, parse_prometheus

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture
def metrics_dir(monkeypatch):
    """PROMETHEUS_MULTIPROC_DIR as SGLang's launcher sets it with --enable-metrics."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "placeholder")   # restored (unset) afterwards
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    sglang_common.set_prometheus_multiproc_dir()
    yield os.environ["PROMETHEUS_MULTIPROC_DIR"]


def _metrics_text() -> str:
    """GET /metrics from SGLang's own Prometheus mount (a fresh collector per read)."""
    app = Starlette()
    sglang_common.add_prometheus_middleware(app)
    r = TestClient(app).get("/metrics/")
    assert r.status_code == 200
    return r.text


class Rank:
    """One scheduler-like process (metrics_rank.py) publishing `arm`."""

    def __init__(self, arm):
        self.p = subprocess.Popen([sys.executable, str(HERE / "metrics_rank.py"), arm], cwd=ROOT, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=dict(os.environ, PYTHONPATH=str(ROOT), SGLANG_PLUGINS=""))

    def ready(self):
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            self.p.kill()
            raise AssertionError(f"rank did not start: {line!r} {self.p.stderr.read()[-3000:]}")
        return self

    def exit(self):
        self.p.communicate("exit\n", timeout=60)
        assert self.p.returncode == 0

    def kill(self):
        self.p.kill()
        self.p.wait(timeout=60)


def test_arm_flash_then_dead_ranks_then_a_control_restart(metrics_dir):
    assert arm_from_metrics(_metrics_text()).arm == "unknown"   # nothing published yet
    ranks = [Rank("flash"), Rank("flash")]
    try:
        for r in ranks:
            r.ready()
        text = _metrics_text()
        rep = arm_from_metrics(text)
        assert (rep.arm, rep.ranks) == ("flash", 2), text
        assert rep.kernel_hashes == [build.source_hash()] and rep.sglang_versions == ["0.5.23"]
        # per rank: eager + replayed call (on the CPU a replay runs Python), one capture, one logit-cap fallback
        assert (rep.kernel_calls, rep.graph_captures, rep.fallbacks) == (4, 2, {"logit_cap": 2}), text
        assert 'mla_verify_fallbacks_total{reason="logit_cap"} 2.0' in text
        ranks[1].exit()            # a rank that exits no longer counts
        assert arm_from_metrics(_metrics_text()).ranks == 1
    finally:
        ranks[0].kill()            # killed: its sample lingers until the next process publishes
    control = Rank("triton").ready()
    try:
        text = _metrics_text()
        rep = arm_from_metrics(text)
        assert (rep.arm, rep.ranks, rep.kernel_hashes) == ("triton", 1, []), text
        info = [lab for name, lab, v in parse_prometheus(text) if name == INFO]
        assert [lab["backend"] for lab in info] == ["triton"], info   # the killed flash rank was swept
    finally:
        control.exit()


def test_no_metrics_when_the_plugin_is_not_loaded(metrics_dir):
    # SGLANG_PLUGINS whitelisting something else: no process runs the plugin, nothing is published.
    r = subprocess.run([sys.executable, "-c", "import torch\n"
                        "lib = torch.library.Library('torchvision', 'DEF')\n"
                        "[lib.define(o + '(Tensor dets, Tensor scores, float iou_threshold) -> Tensor') "
                        "for o in ('nms', 'qnms')]\n"
                        "from sglang.srt.plugins import load_plugins; load_plugins()\n"
                        "import sys; print('kernel.sglang.plugin' in sys.modules)"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, MLA_VERIFY_BACKEND="flash", SGLANG_PLUGINS="someone_else"))
    assert r.stdout.strip().splitlines()[-1] == "False", r.stderr[-2000:]
    assert arm_from_metrics(_metrics_text()).arm == "unknown"
