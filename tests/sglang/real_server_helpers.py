"""Shared by the real-server job's CPU tests (test_sglang_real_server_*.py): stopping what a job
left running under a root, and reading a launch command line with SGLang 0.5.23's own parser."""
import json
import subprocess
import sys

from kernel.sglang.real_server import environment as envmod
from rollout.inventory import load
from rollout.launchers import make_launcher

# SGLang's ServerArgs parser in a subprocess (its import wants the torchvision operator shim first)
_PARSE = """
import argparse, json, sys
import torch
lib = torch.library.Library("torchvision", "DEF")
for op in ("nms", "qnms"):
    lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser()
ServerArgs.add_cli_args(p)
a = p.parse_args(json.loads(sys.argv[1]))
print(json.dumps({k: getattr(a, k) for k in json.loads(sys.argv[2])}))
"""


def sglang_parsed(args: list[str], keys: tuple[str, ...]) -> dict:
    """{key: value} SGLang 0.5.23's parser reads from `args` (a command line after `sglang serve
    --model-type llm`); asserts it parsed."""
    r = subprocess.run([sys.executable, "-c", _PARSE, json.dumps(args), json.dumps(list(keys))], capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def stop_all(root):
    """Whatever the job left running (a failed test must not leave emulators behind)."""
    inv_path = envmod.Paths(root).inventory
    if inv_path.exists():
        inv = load(inv_path)
        for g in inv.groups:
            make_launcher(g, inv).stop("triton")
