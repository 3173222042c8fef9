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


def _fi_sampling():
    """flashinfer.sampling from the stand-ins, loaded by file (sgl_kernel._record through the
    sk fixture's path) without putting `flashinfer` into sys.modules."""
    spec = importlib.util.spec_from_file_location("fi_sampling_under_test",
                                                  STANDINS / "server_only" / "flashinfer" / "sampling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _renorm64(probs, keep):
    kept = probs.double() * keep
    return kept / kept.sum(-1, keepdim=True)


def test_flashinfer_top_p_and_top_k_renorm_match_a_float64_brute_force(sk):
    fi = _fi_sampling()
    g = torch.Generator().manual_seed(2)
    probs = torch.softmax(torch.randn(6, 300, generator=g) * 3, -1)
    top_p = torch.tensor([0.1, 0.5, 0.9, 0.95, 1.0, 0.3])
    top_k = torch.tensor([1, 5, 40, 0, 300, 1000], dtype=torch.int32)
    keep_p, keep_k = torch.zeros(probs.shape, dtype=torch.float64), torch.zeros(probs.shape, dtype=torch.float64)
    for r in range(6):   # brute force: walk each row's tokens from the most probable
        mass, k = 0.0, int(top_k[r]) if 0 < int(top_k[r]) <= 300 else 300
        for rank, t in enumerate(probs[r].double().argsort(descending=True).tolist()):
            if mass < float(top_p[r]):
                keep_p[r, t] = 1
            mass += float(probs[r, t])
            keep_k[r, t] = float(rank < k)
    got_p, got_k = fi.top_p_renorm_probs(probs, top_p), fi.top_k_renorm_probs(probs, top_k)
    assert got_p.dtype == got_k.dtype == torch.float32
    assert torch.allclose(got_p.double(), _renorm64(probs, keep_p), atol=1e-6)
    assert torch.allclose(got_k.double(), _renorm64(probs, keep_k), atol=1e-6)
    assert int((got_k[0] > 0).sum()) == 1 and int((got_k[3] > 0).sum()) == 300   # k = 0 keeps every token
    assert torch.equal(fi.top_p_renorm_probs(probs, 0.5)[1], got_p[1])           # a float top_p: every row
    assert sk.ran["flashinfer.sampling.top_p_renorm_probs"] == 2 and sk.ran["flashinfer.sampling.top_k_renorm_probs"] == 1


def test_sglang_renorm_on_a_cuda_machine_resolves_to_the_flashinfer_standin(tmp_path):
    # The GPU image has no FlashInfer: SGLang's DFLASH worker failed at startup with
    # "No module named 'flashinfer'" (renorm.py's lazy import, from prewarm_sampling). Here SGLang's
    # own renorm module is imported as on a CUDA machine, with the stand-ins on the path.
    cpu_site = Path(__file__).resolve().parents[1] / "server" / "cpu_site"
    code = ("import json, torch, sglang.srt.utils as u\n"
            "import sglang.srt.utils.common as c\n"
            "u.is_cuda = c.is_cuda = lambda: True\n"
            "from sglang.kernels.ops.sampling import renorm\n"
            "import sgl_kernel\n"
            "p = torch.softmax(torch.arange(8.0), -1)[None]\n"
            "out = renorm.top_p_renorm_prob(p, torch.tensor([0.5]))\n"
            "print(json.dumps([out[0].tolist(), dict(sgl_kernel.ran), c.is_flashinfer_available()]))\n")
    for available in ("false", "true"):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(STANDINS), str(STANDINS / "server_only"), str(cpu_site)]),
                   SGLANG_IS_FLASHINFER_AVAILABLE=available)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        out, ran, fi_available = json.loads(r.stdout.strip().splitlines()[-1])
        assert ran == {"flashinfer.sampling.top_p_renorm_probs": 1}
        assert [x > 0 for x in out] == [False] * 7 + [True]   # the top token holds 63 % of the mass
        # the stand-in is found by find_spec: only the environment's switch keeps SGLang's
        # FlashInfer backends off (what kernel.sglang.real_server.environment sets)
        assert fi_available is (available == "true")


def test_flashinfer_standin_holds_nothing_but_sampling():
    code = ("import flashinfer\n"
            "try:\n    from flashinfer import top_k_top_p_sampling_from_probs\nexcept ImportError: print('absent')\n"
            "try:\n    import flashinfer.mla\nexcept ImportError: print('absent')\n")
    for path, expect in ((STANDINS, "ModuleNotFoundError"), (STANDINS / "server_only", "absent absent")):
        # the stand-ins' folder that gpu_run's stages see has no flashinfer at all
        env = dict(os.environ, PYTHONPATH=str(path))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        assert expect in " ".join(r.stdout.split() + r.stderr.split()), r.stderr
