"""The Kimi-K2 launch template: right flags for SGLang 0.5.23 for both checkpoint kinds (EAGLE3
with a draft, EAGLE on the checkpoint's own NextN layer), DFLASH with its block, a fork's
algorithm (DDTREE) passed through with its own flags, `sglang serve` as the entrypoint, arm
only in the environment."""
import json
import subprocess
import sys

import pytest

from rollout.launch import BACKEND_ENV, check_params, group_env, launch_argv, shell_line

PARAMS = {"model_path": "/models/K2", "draft_model_path": "/models/K2-eagle"}


def argv(**kw):
    return launch_argv({**PARAMS, **kw}, host="127.0.0.1", port=30000, gpus=list(range(8)), arm="flash")


def flag(a, name):
    return a[a.index(name) + 1]


def test_template_flags():
    a = argv()
    assert a[:4] == ["sglang", "serve", "--model-type", "llm"]   # 0.5.23's recommended entrypoint
    assert flag(a, "--attention-backend") == "triton"  # both arms; the plugin reads the env
    assert flag(a, "--page-size") == "1" and flag(a, "--tp-size") == "8"
    assert flag(a, "--speculative-algorithm") == "EAGLE3" and flag(a, "--speculative-num-draft-tokens") == "8"
    assert flag(a, "--speculative-draft-model-path") == "/models/K2-eagle"
    assert "--trust-remote-code" in a and "--enable-metrics" in a  # Kimi's tokenizer code; the arm metrics
    assert flag(a, "--context-length") == "200k" and flag(a, "--cuda-graph-max-bs-decode") == "8"
    assert "--cuda-graph-max-bs" not in a  # gone in 0.5.23 (ambiguous prefix)
    assert flag(a, "--host") == "127.0.0.1" and flag(a, "--port") == "30000"
    assert "flash" not in a and "triton" == flag(a, "--attention-backend")
    assert argv() == launch_argv(PARAMS, host="127.0.0.1", port=30000, gpus=list(range(8)), arm="triton")


def test_tp_size_follows_gpus_and_overrides_apply():
    a = launch_argv({**PARAMS, "speculative_num_steps": 5, "bind_host": "0.0.0.0", "extra_args": ["--x", 1]},
                    host="gpu1", port=1, gpus=[2, 3], arm="triton")
    assert flag(a, "--tp-size") == "2" and flag(a, "--speculative-num-steps") == "5"
    assert flag(a, "--host") == "0.0.0.0" and a[-2:] == ["--x", "1"]


def test_nextn_checkpoint_runs_eagle_without_a_draft():
    a = launch_argv({"model_path": "/models/V3", "speculative_algorithm": "EAGLE"}, host="h", port=1, gpus=[0],
                    arm="flash")
    assert flag(a, "--speculative-algorithm") == "EAGLE" and "--speculative-draft-model-path" not in a


def test_missing_model_path_is_named():
    with pytest.raises(ValueError, match="field 'draft_model_path': not set; EAGLE3 needs an external draft"):
        launch_argv({"model_path": "m"}, host="h", port=1, gpus=[0], arm="flash")
    with pytest.raises(ValueError, match="model_path is not set"):
        launch_argv({"draft_model_path": "d"}, host="h", port=1, gpus=[0], arm="flash")
    with pytest.raises(ValueError, match="field 'speculative_algorithm': 'dflash' is not an algorithm name"):
        launch_argv({"model_path": "m", "speculative_algorithm": "dflash"}, host="h", port=1, gpus=[0], arm="flash")


def test_dflash_takes_its_block_and_no_eagle_flags():
    a = argv(speculative_algorithm="DFLASH", speculative_dflash_block_size=16)
    assert flag(a, "--speculative-algorithm") == "DFLASH" and flag(a, "--speculative-dflash-block-size") == "16"
    assert flag(a, "--speculative-draft-model-path") == "/models/K2-eagle"
    for eagle in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
        assert eagle not in a   # SGLang would warn and override them; the block size is the draft tokens
    assert check_params({"speculative_algorithm": "DFLASH", "speculative_eagle_topk": 4,
                         "draft_model_path": "d"}) == (
        "field 'speculative_eagle_topk': a parameter of EAGLE3/EAGLE/NEXTN, not of speculative_algorithm = "
        "'DFLASH' (its own: speculative_dflash_block_size)")
    assert "DFLASH needs an external draft model" in check_params({"speculative_algorithm": "DFLASH"})
    assert "a parameter of DFLASH" in check_params({"speculative_dflash_block_size": 16, "draft_model_path": "d"})


def test_a_forks_algorithm_passes_through_with_its_own_flags():
    ddtree = ["--speculative-dflash-block-size", "16", "--speculative-ddtree-budget", "32"]
    a = argv(speculative_algorithm="DDTREE", speculative_args=ddtree)
    at = a.index("--speculative-algorithm")
    assert a[at:at + 8] == ["--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "/models/K2-eagle",
                            *ddtree]
    assert "--speculative-num-steps" not in a and a.count("--speculative-dflash-block-size") == 1
    assert "for an algorithm this template does not know" in check_params({"speculative_args": ["--x"]})
    assert "expected a list of argv items" in check_params({"speculative_algorithm": "DDTREE",
                                                            "speculative_args": "--x 1"})
    assert "a parameter of DFLASH" in check_params({"speculative_algorithm": "DDTREE",
                                                    "speculative_dflash_block_size": 16})


def test_group_env_and_shell_line():
    env = group_env([0, 1, 2], "flash")
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1,2", BACKEND_ENV: "flash"}
    assert shell_line(["python", "a b"], env) == "CUDA_VISIBLE_DEVICES=0,1,2 MLA_VERIFY_BACKEND=flash python 'a b'"
    with pytest.raises(ValueError, match="arm"):
        group_env([0], "fast")


SGLANG_PARSE = """
import argparse, json, sys
import torch
lib = torch.library.Library("torchvision", "DEF")  # CPU torch: torchvision's CUDA ops are absent
for op in ("nms", "qnms"):
    lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser()
ServerArgs.add_cli_args(p)
a = p.parse_args(json.loads(sys.argv[1]))
print(json.dumps({k: getattr(a, k) for k in ("tp_size", "page_size", "attention_backend", "context_length",
      "speculative_algorithm", "speculative_num_draft_tokens", "cuda_graph_max_bs_decode", "enable_metrics")}))
sys.stdout.flush()
p.parse_args(json.loads(sys.argv[2]))  # must fail: exit 2 with argparse's message on stderr
"""


def test_sglang_0523_parser_accepts_the_template():
    a = argv()
    old = ["--model-path", "m", "--cuda-graph-max-bs", "8"]
    r = subprocess.run([sys.executable, "-c", SGLANG_PARSE, json.dumps(a[4:]), json.dumps(old)],
                       capture_output=True, text=True, timeout=120)
    assert r.stdout.strip(), r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"tp_size": 8, "page_size": 1, "attention_backend": "triton", "context_length": 200000,
                   "speculative_algorithm": "EAGLE3", "speculative_num_draft_tokens": 8,
                   "cuda_graph_max_bs_decode": 8, "enable_metrics": True}
    # and the pre-0.5.23 flag really is refused by the same parser, so the check above can fail
    assert r.returncode == 2 and "ambiguous option: --cuda-graph-max-bs" in r.stderr


def test_the_console_script_beside_the_inventorys_python():
    a = launch_argv({**PARAMS, "python": "/opt/venv/bin/python"}, host="h", port=1, gpus=[0], arm="flash")
    assert a[:2] == ["/opt/venv/bin/sglang", "serve"]
    a = launch_argv({**PARAMS, "python": "/opt/venv/bin/python", "sglang": "/usr/bin/sglang"}, host="h", port=1,
                    gpus=[0], arm="flash")
    assert a[0] == "/usr/bin/sglang"
