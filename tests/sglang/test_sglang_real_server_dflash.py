"""The real-server job with `--algorithm DFLASH`: the tiny DFlash draft as SGLang 0.5.23's own
config and model classes read it, the DFLASH example inventory and its runtime copy, the
breakdown's draft phase for DFLASH's spans, and the job end to end against rollout's emulator
(setup, up, canary, down: the launch flags, the merged JSON, the file names, the separate root)."""
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ports import free_ports

from kernel.sglang.model_configs import dflash_taps, tiny_dflash_draft, tiny_mla, write_tiny_dflash_draft
from kernel.sglang.real_server import breakdown
from kernel.sglang.real_server import environment as envmod
from rollout.inventory import load
from rollout.launchers import make_launcher

ROOT = Path(__file__).resolve().parents[2]
GATES = ["--gate", "context_tokens=16384", "--gate", "max_new_tokens=16", "--gate", "numerics_prompts=2"]


# -- the draft config -----------------------------------------------------------------------------
def test_taps_stay_below_the_last_target_layer():
    # SGLang's DeepSeek-V3 captures the input of layer id + 1: the last layer's output never
    assert dflash_taps(4) == [0, 1, 2] and dflash_taps(2) == [0] and dflash_taps(61) == [0, 15, 30, 44, 59]
    assert dflash_taps(16, 2) == [0, 14]
    for layers in (2, 3, 4, 16, 61):
        assert all(0 <= t and t + 1 < layers for t in dflash_taps(layers))
    with pytest.raises(ValueError, match="target_layers: DFLASH needs a target of at least 2 layers.*got 1"):
        dflash_taps(1)
    with pytest.raises(ValueError, match="taps: expected 1..3 for a 4-layer target, got 4"):
        dflash_taps(4, 4)
    with pytest.raises(ValueError, match="block_size: expected a positive int, got 0"):
        tiny_dflash_draft(tiny_mla(4), block_size=0)


def test_sglang_reads_the_draft_config_and_builds_the_draft_model(tmp_path, monkeypatch):
    from sglang.srt.layers.radix_attention import AttentionType
    from sglang.srt.models.dflash import DFlashDraftModel
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config
    from sglang.srt.utils.hf_transformers_utils import get_config
    import sglang.srt.layers.rotary_embedding.base as rope_base

    target = tiny_mla(4)
    path = write_tiny_dflash_draft(tmp_path / "draft", target, block_size=16)
    cfg = get_config(str(path), trust_remote_code=True)          # what SGLang's ModelConfig loads
    assert cfg.architectures == ["DFlashDraftModel"] and type(cfg).__name__ == "Qwen3Config"
    d = parse_dflash_draft_config(draft_hf_config=cfg)
    assert (d.block_size, d.target_layer_ids, d.mask_token_id) == (16, [0, 1, 2], target["vocab_size"] - 1)
    assert d.resolve_target_layer_ids(target_num_layers=4) == [0, 1, 2]
    # the server's CPU engine (SGLANG_USE_CPU_ENGINE=1) takes torch's rope; this process is not one
    monkeypatch.setattr(rope_base, "_is_cpu", True)
    m = DFlashDraftModel(cfg)
    assert m.block_size == 16 and m.num_context_features == 3
    assert (m.fc.in_features, m.fc.out_features) == (3 * target["hidden_size"], target["hidden_size"])
    (layer,) = m.layers
    attn = layer.self_attn
    assert (attn.num_heads, attn.num_kv_heads, attn.head_dim) == (8, 2, 128)      # GQA, not MLA
    assert attn.attn.attn_type == AttentionType.ENCODER_ONLY                      # the block attends both ways
    assert attn.rotary_emb.max_position_embeddings >= 200000                      # the servers' context length


# -- the inventories --------------------------------------------------------------------------------
SPECULATIVE = {"speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
               "speculative_num_draft_tokens", "draft_model_path", "speculative_dflash_block_size"}


def test_the_dflash_example_is_the_eagle_one_with_dflash_launch_names_ports_and_root():
    eagle = tomllib.loads(envmod.EXAMPLES["EAGLE"].read_text())
    dflash = tomllib.loads(envmod.EXAMPLES["DFLASH"].read_text())
    assert {k: v for k, v in dflash["launch"].items() if k in SPECULATIVE} == {
        "speculative_algorithm": "DFLASH", "speculative_dflash_block_size": 16,
        "draft_model_path": "/tmp/mla-real-server-dflash/models/L4-dflash-b16"}
    swap = lambda v: v.replace("/tmp/mla-real-server/", "/tmp/mla-real-server-dflash/") if isinstance(v, str) else v
    assert {k: v for k, v in dflash["launch"].items() if k not in SPECULATIVE} == {
        k: swap(v) for k, v in eagle["launch"].items() if k not in SPECULATIVE}
    assert dflash["gates"] == eagle["gates"]
    assert {k: swap(v) for k, v in eagle["rollout"].items() if k != "canary"} == \
        {k: v for k, v in dflash["rollout"].items() if k != "canary"}
    assert [(g["name"], g["port"]) for g in dflash["group"]] == [("h200-dflash-a", 30002), ("h200-dflash-b", 30003)]
    assert [{k: v for k, v in g.items() if k not in ("name", "port")} for g in dflash["group"]] == \
        [{k: v for k, v in g.items() if k not in ("name", "port")} for g in eagle["group"]]


def test_runtime_inventory_points_dflash_at_the_roots_draft(tmp_path):
    paths = envmod.Paths(tmp_path)
    inv = load(envmod.write_inventory(paths, envmod.runtime_inventory(paths, 8, algorithm="DFLASH", block_size=8)))
    assert inv.launch["draft_model_path"] == str(tmp_path / "models" / "L8-dflash-b8")
    line = make_launcher(inv.groups[0], inv).describe_start("flash")
    assert (f" --speculative-algorithm DFLASH --speculative-draft-model-path {tmp_path}/models/L8-dflash-b8 "
            f"--speculative-dflash-block-size 8 ") in line, line
    assert "--speculative-num-steps" not in line and "--speculative-eagle-topk" not in line
    assert paths.inventory.read_text().startswith("# Written by kernel/sglang/real_server from "
                                                  "rollout/inventory.h200-local-dflash.toml")
    with pytest.raises(ValueError, match="block_size: DFLASH's parameter, not EAGLE's"):
        envmod.runtime_inventory(paths, 4, block_size=8)
    with pytest.raises(ValueError, match="algorithm: expected one of EAGLE, DFLASH, got 'DDTREE'"):
        envmod.runtime_inventory(paths, 4, algorithm="DDTREE")


# -- the breakdown ----------------------------------------------------------------------------------
def _span(name, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 7, "tid": 1, "ts": ts, "dur": dur}


def _launched(corr, name, ts, dur):
    return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 1, "ts": ts, "dur": 5,
             "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 9, "ts": ts + 20, "dur": dur,
             "args": {"correlation": corr}}]


def test_dflash_draft_forward_is_the_draft_phase_not_outside():
    """DFLASH's worker opens no `draft` span; its draft model runner's forward (TARGET_VERIFY mode)
    is a `step[DRAFT` span, and the projection into the draft KV cache runs outside any span."""
    ev, corr = [], 0
    for s in range(4):
        t = s * 10000
        ev.append(_span("step[DRAFT bs=1]", t, 2000))
        ev += _launched(corr := corr + 1, "_fwd_kernel", t + 100, 800)          # the draft's GQA attention
        ev += _launched(corr := corr + 1, "nvjet_gemm", t + 1000, 300)
        ev.append(_span("step[VERIFY bs=1]", t + 3000, 3000))
        ev += _launched(corr := corr + 1, "void mla_verify_kernel_small<4>(Params)", t + 3100, 100)
        ev += _launched(corr := corr + 1, "fused_kv_materialize", t + 7000, 50)
    c = breakdown.classify(ev, layers=1)
    ph = c["phases"]
    assert c["steps"] == 3
    assert ph["draft"]["attention_ms_per_step"] == pytest.approx(0.8) and ph["draft"]["ms_per_step"] == \
        pytest.approx(1.1) and ph["draft"]["ours_ms_per_step"] == 0
    assert ph["verify"]["ours_ms_per_step"] == pytest.approx(0.1) and ph["draft_extend"]["ms_per_step"] == 0
    assert ph["outside"]["ms_per_step"] == pytest.approx(0.05)


# -- the job against the emulator ---------------------------------------------------------------------
def job(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "kernel.sglang.real_server", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dflash_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real-server-dflash")
    root, out, ports = tmp / "root", tmp / "out", free_ports(2)
    try:
        r = job("--emulate", "0.2", "--algorithm", "DFLASH", "--root", str(root), "--out", str(out), "--ports",
                ",".join(map(str, ports)), "--steps", "setup,up,canary,down", *GATES)
    finally:
        inv_path = envmod.Paths(root).inventory
        if inv_path.exists():
            inv = load(inv_path)
            for g in inv.groups:
                make_launcher(g, inv).stop("triton")
    return r, root, out


def test_dflash_job_launches_dflash_and_says_so(dflash_run):
    r, root, out = dflash_run
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    (f,) = out.glob("real-server-emulated-dflash-*.json")
    assert len(list(out.glob("real-server-logs-dflash-*.tar.xz"))) == 1 and not list(out.glob("real-server-emulated-2*"))
    m = json.loads(f.read_text())
    assert {k: v["status"] for k, v in m["steps"].items()} == {s: "ok" for s in ("setup", "up", "canary", "down")}
    assert (m["algorithm"], m["block_size"]) == ("DFLASH", 16) and m["label"].endswith("DFLASH (tiny DFlash draft, block 16)")
    draft = root / "models" / "L4-dflash-b16"
    assert m["draft"]["path"] == str(draft) and m["draft"]["target_layer_ids"] == [0, 1, 2]
    assert json.loads((draft / "config.json").read_text())["dflash_config"]["block_size"] == 16
    # every server the rollout tool started got DFLASH's flags through the launch template
    starts = [json.loads(x) for x in (root / "rollout-state" / "audit.jsonl").read_text().splitlines()]
    commands = [a["command"] for a in starts if a.get("command")]
    assert len(commands) >= 3      # two groups up, the canary restarted on flash
    for c in commands:
        assert (f" --speculative-algorithm DFLASH --speculative-draft-model-path {draft} "
                f"--speculative-dflash-block-size 16 ") in c and "--speculative-num-steps" not in c, c
    # and each server said so in /server_info (the emulator reads the same flags)
    for g in m["steps"]["up"]["groups"].values():
        assert (g["server_args"]["speculative_algorithm"], g["server_args"]["speculative_num_draft_tokens"]) == \
            ("DFLASH", 16)
    # the numerics gate ran in its logprob mode (DFLASH returns decode-time logprobs)
    assert m["steps"]["canary"]["numerics"]["settings"]["mode"] == "logprobs"
    assert "DFLASH block 16" in m["steps"]["setup"]["summary"]


def test_a_root_serves_one_algorithm(dflash_run):
    _, root, _ = dflash_run
    assert json.loads(envmod.Paths(root).algorithm_file.read_text()) == {"algorithm": "DFLASH", "block_size": 16,
                                                                         "kv_cache_dtype": "auto"}
    r = job("--emulate", "0.2", "--root", str(root), "--steps", "setup", timeout=60)
    assert r.returncode == 2 and (f"--root {root}: its servers, state and results are a DFLASH run's; --algorithm "
                                  f"EAGLE takes its own root (default /tmp/mla-real-server)") in r.stderr, r.stderr


def test_bad_dflash_arguments_are_named(tmp_path):
    r = job("--emulate", "0.2", "--root", str(tmp_path), "--block-size", "8", "--steps", "setup", timeout=60)
    assert r.returncode == 2 and "--block-size: DFLASH's parameter; --algorithm is EAGLE" in r.stderr, r.stderr
    r = job("--emulate", "0.2", "--root", str(tmp_path), "--algorithm", "DFLASH", "--layers", "1", "--steps", "setup",
            timeout=60)
    assert r.returncode == 2 and "--layers: DFLASH needs a target of at least 2 layers" in r.stderr, r.stderr
    r = job("--emulate", "0.2", "--root", str(tmp_path), "--algorithm", "DFLASH", "--block-size", "1", timeout=60)
    assert r.returncode == 2 and "--block-size: DFLASH verifies at least 2 tokens per request, got 1" in r.stderr


def test_phase_3_label_names_dflash(dflash_run):
    """Phase 3 shows the newest real-server file, whichever algorithm it ran: its label says DFLASH."""
    from notebooks import findings

    (f,) = dflash_run[2].glob("real-server-emulated-dflash-*.json")
    m = json.loads(f.read_text())
    assert findings.real_label(m).endswith(", DFLASH speculative decoding (block 16, tiny DFlash draft)")
    real = dict(m, emulated=False, gpu="NVIDIA H200", bundle={"sglang": "0.5.23"})
    assert findings.real_label(real) == ("real SGLang 0.5.23 server, dummy-weight 4-layer MLA model, one H200, DFLASH "
                                         "speculative decoding (block 16, tiny DFlash draft)")
    assert findings.real_label(dict(real, algorithm="EAGLE", block_size=None)) == \
        "real SGLang 0.5.23 server, dummy-weight 4-layer MLA model, one H200, EAGLE's draft extend on, through the kernel"
