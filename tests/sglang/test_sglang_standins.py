"""The stand-ins the server bundle carries (kernel/sglang/standins/): sgl_kernel's torch versions
against float64 references and sgl_kernel's contract, placeholders that raise naming
themselves, and the record (in memory and in MLA_VERIFY_STANDIN_LOG) of which ran."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

STANDINS = Path(__file__).resolve().parents[2] / "kernel" / "sglang" / "standins"


@pytest.fixture(scope="module")
def sk():
    """The stand-in sgl_kernel, imported here and removed again afterwards (other tests must
    keep seeing a machine without sgl_kernel)."""
    assert "sgl_kernel" not in sys.modules
    sys.path.insert(0, str(STANDINS))
    meta_path = list(sys.meta_path)
    try:
        import sgl_kernel
        yield sgl_kernel
    finally:
        sys.path.remove(str(STANDINS))
        sys.meta_path[:] = meta_path
        for name in [m for m in sys.modules if m == "sgl_kernel" or m.startswith("sgl_kernel.")]:
            del sys.modules[name]


def load_record():
    spec = importlib.util.spec_from_file_location("standin_record_under_test", STANDINS / "sgl_kernel" / "_record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rms64(x, w, eps):
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rmsnorm_matches_float64_and_writes_out(sk, dtype):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(5, 1024, generator=g).to(dtype), torch.randn(1024, generator=g).to(dtype)
    ref = _rms64(x, w, 1e-6)
    got = sk.rmsnorm(x, w, 1e-6)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    assert got.dtype == dtype and torch.allclose(got.double(), ref, rtol=tol, atol=tol)
    out = torch.full_like(x, float("nan"))
    assert sk.rmsnorm(x, w, 1e-6, out) is out and torch.equal(out, got)


def test_fused_add_rmsnorm_in_place(sk):
    g = torch.Generator().manual_seed(1)
    x, r, w = (torch.randn(3, 512, generator=g).to(torch.bfloat16) for _ in range(3))
    w = w[0]
    s64 = x.double() + r.double()
    x_in, r_in = x.clone(), r.clone()
    assert sk.fused_add_rmsnorm(x_in, r_in, w, 1e-6) is None
    assert torch.allclose(r_in.double(), s64, rtol=1e-2, atol=1e-2)
    assert torch.allclose(x_in.double(), _rms64(s64, w, 1e-6), rtol=2e-2, atol=2e-2)


def test_silu_and_mul(sk):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 2 * 256, generator=g).to(torch.bfloat16)
    a, b = x[:, :256].double(), x[:, 256:].double()
    ref = a * torch.sigmoid(a) * b
    got = sk.silu_and_mul(x)
    assert got.shape == (4, 256) and torch.allclose(got.double(), ref, rtol=1e-2, atol=1e-2)
    out = torch.empty(4, 256, dtype=torch.bfloat16)
    assert sk.silu_and_mul(x, out) is out and torch.equal(out, got)


def test_moe_sum_reduce(sk):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 2, 64, generator=g).to(torch.bfloat16)
    out = torch.empty(6, 64, dtype=torch.bfloat16)
    sk.moe_sum_reduce(x, out, 2.5)
    assert torch.allclose(out.double(), x.double().sum(1) * 2.5, rtol=1e-2, atol=1e-2)


def _align_reference(topk_ids, buckets, block, sorted_len, nblocks, ignore_invalid=False):
    """sgl_kernel's moe_align_block_size, written as loops (the +1 bucket convention)."""
    flat = [int(t) + 1 for t in topk_ids.flatten()]
    valid = [0 <= b < buckets for b in flat]
    counts = [sum(1 for b, v in zip(flat, valid) if v and b == k) for k in range(buckets)]
    padded = [(c + block - 1) // block * block for c in counts]
    starts = [sum(padded[:k]) for k in range(buckets)]
    total = sum(padded)
    sorted_ids = [len(flat)] * sorted_len
    fill = list(starts)
    for i, (b, v) in enumerate(zip(flat, valid)):
        if v:
            sorted_ids[fill[b]] = i
            fill[b] += 1
    experts = [None] * nblocks
    for j in range(total // block):
        b = max(k for k in range(buckets) if starts[k] <= j * block)
        experts[j] = b - 1
    return sorted_ids, experts, total, starts


@pytest.mark.parametrize("tokens,topk,experts,block,with_filtered", [(1, 2, 8, 16, False), (37, 2, 8, 16, True),
                                                                      (300, 3, 5, 64, True)])
def test_moe_align_block_size_matches_the_kernels_contract(sk, tokens, topk, experts, block, with_filtered):
    g = torch.Generator().manual_seed(tokens)
    ids = torch.randint(-1 if with_filtered else 0, experts, (tokens, topk), generator=g, dtype=torch.int32)
    buckets = experts + 1
    numel = ids.numel()
    max_padded = (numel + buckets * (block - 1) + 3) // 4 * 4
    nblocks = (max_padded + block - 1) // block
    sorted_ids = torch.full((max_padded,), -7, dtype=torch.int32)
    expert_ids = torch.full((nblocks,), -9, dtype=torch.int32)
    post_pad = torch.zeros(1, dtype=torch.int32)
    cumsum = torch.zeros(buckets + 1, dtype=torch.int32)
    sk.moe_align_block_size(ids, buckets, block, sorted_ids, expert_ids, post_pad, cumsum, True)
    ref_sorted, ref_experts, total, starts = _align_reference(ids, buckets, block, max_padded, nblocks)
    assert post_pad.item() == total
    assert sorted_ids.tolist() == ref_sorted
    nb = total // block
    assert expert_ids[:nb].tolist() == ref_experts[:nb]
    assert (expert_ids[nb:] == -9).all()   # beyond the padded total: untouched, as the kernel leaves it
    assert cumsum.tolist() == starts + [total]


def test_moe_align_ignores_invalid_ids_when_asked(sk):
    ids = torch.tensor([[0, 7], [1, 0]], dtype=torch.int32)   # 7 is outside 3 experts (4 buckets)
    sorted_ids = torch.full((32,), -1, dtype=torch.int32)
    expert_ids = torch.zeros(8, dtype=torch.int32)
    post_pad, cumsum = torch.zeros(1, dtype=torch.int32), torch.zeros(5, dtype=torch.int32)
    sk.moe_align_block_size(ids, 4, 4, sorted_ids, expert_ids, post_pad, cumsum, True, True)
    ref_sorted, ref_experts, total, _ = _align_reference(ids, 4, 4, 32, 8)
    assert post_pad.item() == total == 8 and sorted_ids.tolist() == ref_sorted
    assert 1 not in sorted_ids.tolist()   # slot 1 (expert 7) took no position


def test_weak_ref_tensor_shares_storage(sk):
    t = torch.arange(6.0)
    w = sk.weak_ref_tensor(t)
    t[2] = 40.0
    assert w[2] == 40.0 and w.data_ptr() == t.data_ptr()


def test_placeholders_and_the_record_in_a_fresh_process(tmp_path):
    log = tmp_path / "standins.log"
    code = ("import json, torch, sgl_kernel, flash_mla\n"
            "from sgl_kernel import rmsnorm, gemma_rmsnorm\n"
            "from flash_mla.flash_mla_interface import FlashMLASchedMeta\n"
            "x = torch.ones(2, 8)\n"
            "for _ in range(3): rmsnorm(x, torch.ones(8))\n"
            "msgs = []\n"
            "for f in (gemma_rmsnorm, FlashMLASchedMeta):\n"
            "    try: f()\n"
            "    except NotImplementedError as e: msgs.append(str(e))\n"
            "print(json.dumps([msgs, sgl_kernel.called, dict(sgl_kernel.ran)]))\n")
    env = dict(os.environ, PYTHONPATH=str(STANDINS), MLA_VERIFY_STANDIN_LOG=str(log))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    msgs, called, ran = json.loads(r.stdout)
    assert msgs[0].startswith("sgl_kernel.gemma_rmsnorm is a stand-in")
    assert msgs[1].startswith("flash_mla.flash_mla_interface.FlashMLASchedMeta is a stand-in")
    assert called == ["sgl_kernel.gemma_rmsnorm", "flash_mla.flash_mla_interface.FlashMLASchedMeta"]
    assert ran == {"sgl_kernel.rmsnorm": 3}
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    # one line per (kind, name) and process, never one per call
    assert [(x["kind"], x["name"]) for x in lines] == [("ran", "sgl_kernel.rmsnorm"), ("called", msgs[0].split()[0]),
                                                      ("called", "flash_mla.flash_mla_interface.FlashMLASchedMeta")]
    summary = load_record().read_log(log)
    assert summary == {"ran": ["sgl_kernel.rmsnorm"], "called": sorted(called), "processes": 1}
