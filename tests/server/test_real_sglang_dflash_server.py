"""SGLang 0.5.23's real server with DFLASH on the CPU, started by the rollout tool's `up`.

One real server (group g1; g0 is rollout's emulator, as the tool keeps one group serving): the two-layer tiny MLA target (kernel.sglang.model_configs.write_tiny_mla,
its NextN layer unused, as in the real-server job's DFLASH run) and the tiny DFlash draft beside
it (write_tiny_dflash_draft: one GQA layer reading target layer 0, block 4 here), dummy weights,
the rollout tool's default launch template with `[launch] speculative_algorithm = "DFLASH"`,
`draft_model_path` and `speculative_dflash_block_size` (so `--speculative-algorithm DFLASH
--speculative-draft-model-path ... --speculative-dflash-block-size 4`), the CPU flags of
test_real_sglang_server.py, the plugin through this checkout's entry point, cpu_site/ on the
server's PYTHONPATH. DFLASH's CPU path needs four stand-ins beyond EAGLE's (each recorded when it
runs; cpu_site/mla_verify_cpu_test_plugin.py and sgl_kernel say why): the CPU platform admitted
for DFLASH, copy_all_layer_kv_cache_cpu (the draft's MHA pool warm-up), record_stream a no-op on
CPU tensors, and the draft's bf16 input_embeds back to float32.

Asserted: the arm gate's source (the plugin's mla_verify_backend_info metric) says triton; the
server reports DFLASH and block 4 in /server_info; a /generate with return_logprob returns its
tokens, one logprob per token, and DFLASH's verify counters in meta_info (spec_verify_ct,
spec_accept_length, spec_num_proposed_drafts = verify steps x (block - 1)); the stand-ins that
ran are exactly the known ones; the launcher's stop drains it.

Measured on this project's 2-core machine with other jobs on it (2026-12-02): /health after
31-35 s started by hand; through this module `up` 33 s (g1 serving after 33 s, SGLang's own
warm-up request included), the 8-token /generate 5.7 s (7 verify steps), the stop 3 s: 46-50 s
for the module (it prints its timings).
"""
from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

import pytest

from cpu_fleet import CpuFleet
from kernel.sglang.model_configs import tiny_mla, write_tiny_dflash_draft, write_tiny_mla

BLOCK = 4
# what the DFLASH path of this configuration calls (the sgl_kernel stand-ins and the plugin's hooks)
DFLASH_STANDINS = {"cpu-platform@_handle_dflash", "copy_all_layer_kv_cache_cpu", "assign_req_to_token_pool_cpu",
                   "assign_extend_cache_locs_cpu", "Tensor.record_stream@DFlashWorkerV2.forward_batch_generation",
                   "input_embeds.to(weight dtype)@DFlashDraftModel.forward"}


class DflashServer(CpuFleet):
    """g0: the emulator (DFLASH's shape); g1: SGLang's real server with DFLASH and the tiny draft."""

    def __init__(self, tmp: Path):
        model = write_tiny_mla(tmp / "model", layers=2)
        self.draft = write_tiny_dflash_draft(tmp / "draft", tiny_mla(2), block_size=BLOCK)
        super().__init__(tmp, model, ['speculative_algorithm = "DFLASH"',
                                      f"draft_model_path = {json.dumps(str(self.draft))}",
                                      f"speculative_dflash_block_size = {BLOCK}"],
                         emulator_args=["--speculative-algorithm", "DFLASH"])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = DflashServer(tmp_path_factory.mktemp("real-sglang-dflash"))
    try:
        r = s.cli("up")
        assert r.returncode == 0, r.stderr[-2000:] + s.log_tail()
        seconds = re.search(r"\[g1\] serving after ([\d.]+) s", r.stdout + r.stderr)
        s.timings["g1 serving after"] = float(seconds.group(1)) if seconds else -1
        yield s
    finally:
        s.stop_all()
        print(f"\ntimings (s): {json.dumps(s.timings)}")


def test_the_plugin_reports_triton_and_the_server_dflash(server):
    from rollout.arm import read_arm
    from rollout.client import get_json

    rep = read_arm(server.url)
    assert (rep.arm, rep.ranks, rep.sglang_versions) == ("triton", 1, ["0.5.23"]), rep
    info = get_json(server.url, "/server_info", timeout=30)
    assert (info["speculative_algorithm"], info["speculative_num_draft_tokens"], info["speculative_dflash_block_size"],
            info["speculative_draft_model_path"]) == ("DFLASH", BLOCK, BLOCK, str(server.draft))
    audit = [json.loads(x) for x in (server.state_dir / "audit.jsonl").read_text().splitlines()]
    (command,) = [a["command"] for a in audit if a.get("command") and a.get("group") == "g1"]
    assert (f" --speculative-algorithm DFLASH --speculative-draft-model-path {server.draft} "
            f"--speculative-dflash-block-size {BLOCK} ") in command, command


def test_generate_returns_tokens_logprobs_and_dflash_verify_counters(server):
    from rollout.client import post_json

    t0 = time.monotonic()
    body = {"input_ids": list(range(2000, 2012)), "return_logprob": True,
            "sampling_params": {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True}}
    out = post_json(server.url, "/generate", body, timeout=600)
    server.timings["generate 8 tokens"] = round(time.monotonic() - t0, 1)
    meta = out["meta_info"]
    assert len(out["output_ids"]) == 8 and meta["completion_tokens"] == 8
    assert [t for _, t, _ in meta["output_token_logprobs"]] == out["output_ids"]
    assert all(lp <= 0 for lp, _, _ in meta["output_token_logprobs"])
    steps = meta["spec_verify_ct"]
    # each verify step commits its accepted drafts and one bonus token; the first token is the prefill's
    assert 1 <= steps <= 7 and meta["spec_accept_length"] == pytest.approx(8 / (steps + 1), rel=0.2)
    assert meta["spec_num_proposed_drafts"] == steps * (BLOCK - 1)
    called = server.standins()
    assert called == DFLASH_STANDINS, called


def test_stop_drains_the_dflash_server(server):
    t0 = time.monotonic()
    how = server.launcher().stop("triton")
    server.timings["g1 stop"] = round(time.monotonic() - t0, 1)
    assert how == "drained", how
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
