"""Decode context parallelism simulated on one GPU: the per-rank TARGET_VERIFY kernel calls of
N ranks, merged by the same LSE arithmetic, against the unsharded call; timed.

Stage `dcp-sim` of `python -m kernel.gpu_run` (needs the SGLang bundle on PYTHONPATH: the
prefix is sharded with SGLang's own `get_dcp_lens` and `create_triton_kv_indices_for_dcp_triton`,
as `TritonAttnBackend._dcp_kv_indices` does). For each N in `ranks`:
- the batch: one request, S prefix tokens, a T-token tree, heads_per_rank * N query heads
  (TP gives each rank heads_per_rank heads; DCP rank r computes the prefix for all N of its
  group's ranks' heads), page size `page` * N in SGLang's widened slot space, slot s on rank
  s % N at row s // N of that rank's pool;
- rank r: the draft block on its own heads (our kernel, zero-length prefixes, the tree
  compacted, as kernel/sglang/dcp_verify.py calls it), its prefix shard for all heads (the
  draft keys masked out); the shards merged as SGLang's cp_lse_ag_out_rs_mha merges them
  (dcp_merge.simulated_ranks_merge, checked against SGLang's collective in tests/sglang), then
  the two parts (dcp_merge.merge_into). All N ranks side by side must equal the unsharded call
  (and the float64 oracle);
- timed (CUDA-graph replays, medians, rotating pool copies so L2 does not serve repeats): the
  unsharded call of one rank today (heads_per_rank heads over all S), each rank's two calls,
  and the per-layer epilogue (fp32 copy and merge); the collectives are not run (one GPU):
  their bytes per layer are computed, and `estimate` turns bytes and the measured kernel
  times into a per-step saving under the link bandwidths and latencies in ASSUMED_LINKS.
"""
from __future__ import annotations

import torch

from ..checks import HEAD_DIM, V_DIM
from ..inputs import make_case
from ..reference import verify_attention_reference
from .dcp_merge import merge_into, simulated_ranks_merge
from .dcp_verify import compact_tree

LAYERS = 61   # Kimi-K2 / DeepSeek-V3 MLA layers per verify step
# Assumptions, not measurements: effective collective bandwidth per GPU and direction (NCCL bus
# bandwidth, large messages) and a fixed cost per small collective inside a CUDA graph.
ASSUMED_LINKS = {
    "nvlink-h200": {"GBps": 350.0, "latency_us": 10.0,
                    "what": "HGX H200, NVLink 4 (450 GB/s per direction nominal), NCCL ring"},
    "pcie-gen5": {"GBps": 40.0, "latency_us": 20.0,
                  "what": "PCIe Gen5 x16 without NVLink (e.g. RTX PRO 6000 Blackwell), 64 GB/s nominal"},
    "pcie-gen4": {"GBps": 20.0, "latency_us": 25.0, "what": "PCIe Gen4 x16, 32 GB/s nominal"},
}


def rank_pool(case, n: int, r: int, rows: int) -> torch.Tensor:
    """Rank r's latent pool [rows, 1, 576]: the slots s with s % n == r at row s // n, NaN elsewhere."""
    pool = torch.full((rows, 1, HEAD_DIM), float("nan"), dtype=case.kv_cache.dtype, device=case.kv_cache.device)
    mine = case.kv_indices[case.kv_indices % n == r]
    pool[mine // n] = case.kv_cache[mine]
    return pool


def shard_indices(case, n: int, r: int):
    """Rank r's (kv_indptr [bs + 1] int32, kv_indices int64 rows) of the case's prefixes, built by
    SGLang's own DCP helpers from a req_to_token table of the case's widened slots."""
    from sglang.kernels.ops.attention.dcp_kernels import create_triton_kv_indices_for_dcp_triton
    from sglang.srt.layers.dcp.layout import get_dcp_lens

    dev = case.kv_cache.device
    S = case.meta["prefix_lens"]
    bs = len(S)
    req_to_token = torch.zeros(bs + 1, max(S) + 1, dtype=torch.int32, device=dev)
    kvp = case.kv_indptr.tolist()
    for b in range(bs):
        req_to_token[b + 1, :S[b]] = case.kv_indices[kvp[b]:kvp[b + 1]].to(torch.int32)
    req_pool_indices = torch.arange(1, bs + 1, dtype=torch.int64, device=dev)
    lens = get_dcp_lens(torch.tensor(S, dtype=torch.int32, device=dev), n, r)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=dev)
    kv_indptr[1:] = torch.cumsum(lens, 0)
    kv_indices = torch.zeros(max(1, -(-sum(S) // n) + bs), dtype=torch.int64, device=dev)
    create_triton_kv_indices_for_dcp_triton[(bs,)](req_to_token, req_pool_indices, lens, kv_indptr, None,
                                                   kv_indices, req_to_token.stride(0), n, r)
    return kv_indptr, kv_indices


class SimRank:
    """One simulated rank's fixed inputs and outputs, and its two kernel calls."""

    def __init__(self, ops, case, n: int, r: int, heads: int, pool: torch.Tensor, T: int):
        dev = case.q.device
        bs, N = case.kv_indptr.shape[0] - 1, case.q.shape[0]
        self.ops, self.case, self.T, self.heads = ops, case, T, heads
        self.ws = ops.get_workspace(dev)
        self.pool = pool
        self.q_local = case.q[:, r * heads:(r + 1) * heads].contiguous()
        self.q_all = case.q                                   # what the all-gather hands every rank
        self.kv_indptr, self.kv_indices = shard_indices(case, n, r)
        self.zero_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=dev)
        self.tree = self.tree_indptr = None
        if case.custom_mask is not None:
            self.tree = torch.zeros(bs * T * T, dtype=torch.uint8, device=dev)
            seq_lens = case.kv_indptr[1:] - case.kv_indptr[:-1]
            compact_tree(case.custom_mask, case.mask_indptr, seq_lens, bs, T, self.tree)
            self.tree_indptr = torch.arange(bs + 1, dtype=torch.int64, device=dev) * (T * T)
        shard_max = int(self.kv_indptr.diff().max()) if bs else 0
        self.no_draft = torch.zeros(T * (shard_max + T), dtype=torch.uint8, device=dev)
        self.no_draft_indptr = torch.zeros(bs + 1, dtype=torch.int64, device=dev)
        f32 = dict(dtype=torch.float32, device=dev)
        self.draft_out = torch.empty(N, heads, V_DIM, dtype=torch.bfloat16, device=dev)
        self.draft_lse = torch.empty(N, heads, **f32)
        self.prefix_out = torch.empty(N, n * heads, V_DIM, dtype=torch.bfloat16, device=dev)
        self.prefix_f32 = torch.empty(N, n * heads, V_DIM, **f32)
        self.prefix_lse = torch.empty(N, n * heads, **f32)
        self.tmp = torch.empty(3, N, heads, **f32)
        self.acc = torch.empty(N, heads, V_DIM, **f32)
        self.out = torch.empty(N, heads, V_DIM, dtype=torch.bfloat16, device=dev)

    def draft_call(self, pool=None):
        c = self.case
        self.ops.verify_attention(self.q_local, self.pool if pool is None else pool, self.zero_indptr, self.kv_indices,
                                  c.k_extend, self.tree, self.tree_indptr, c.qo_indptr, c.sm_scale, out=self.draft_out,
                                  lse_out=self.draft_lse, workspace=self.ws, max_draft_len=self.T)

    def prefix_call(self, pool=None):
        c = self.case
        self.ops.verify_attention(self.q_all, self.pool if pool is None else pool, self.kv_indptr, self.kv_indices,
                                  c.k_extend, self.no_draft, self.no_draft_indptr, c.qo_indptr, c.sm_scale,
                                  out=self.prefix_out, lse_out=self.prefix_lse, workspace=self.ws,
                                  max_draft_len=self.T)
        self.prefix_f32.copy_(self.prefix_out)

    def epilogue(self, p_out, p_lse):
        merge_into(self.out, p_out, p_lse, self.draft_out, self.draft_lse, self.tmp[0], self.tmp[1], self.tmp[2],
                   self.acc)


def simulate(ops, case, n: int, heads: int, T: int, pools=None) -> tuple[torch.Tensor, list[SimRank]]:
    """All n ranks' outputs side by side [N, n * heads, 512] bf16, and the ranks."""
    rows = -(-case.kv_cache.shape[0] // n) + 1
    ranks = [SimRank(ops, case, n, r, heads, rank_pool(case, n, r, rows) if pools is None else pools[r], T)
             for r in range(n)]
    for rk in ranks:
        rk.draft_call()
        rk.prefix_call()
    merged = simulated_ranks_merge([rk.prefix_f32 for rk in ranks], [rk.prefix_lse for rk in ranks])
    for rk, (p_out, p_lse) in zip(ranks, merged):
        rk.epilogue(p_out, p_lse)
    return torch.cat([rk.out for rk in ranks], dim=1), ranks


def collective_bytes(tokens: int, heads: int, n: int) -> dict:
    """Bytes each rank sends (= receives) per layer in the collectives of the DCP verify path
    (ring algorithms): the q all-gather (bf16 [tokens, heads, 576] per rank), the LSE all-gather
    and the fp32 output all-reduce of cp_lse_ag_out_rs_mha ([tokens, n * heads] and
    [tokens, n * heads, 512])."""
    q = (n - 1) * tokens * heads * HEAD_DIM * 2
    lse = (n - 1) * tokens * n * heads * 4
    out = 2 * (n - 1) * tokens * n * heads * V_DIM * 4 // n
    return {"q_all_gather": q, "lse_all_gather": lse, "out_all_reduce": out, "total": q + lse + out,
            "collectives": 3, "out_reduce_scatter_instead": out // 2, "out_bf16_instead": out // 2}


def estimate(unsharded_us: float, rank_us: float, epilogue_us: float, comm: dict, layers: int = LAYERS) -> dict:
    """Per verify step (all layers): kernel time saved, collective time added, net saving, per
    ASSUMED_LINKS entry. Positive net = DCP is faster. Estimates, from measured kernel times and
    assumed links."""
    out = {}
    saved_ms = layers * (unsharded_us - rank_us - epilogue_us) / 1e3
    for name, link in ASSUMED_LINKS.items():
        comm_ms = layers * (comm["total"] / (link["GBps"] * 1e3) + comm["collectives"] * link["latency_us"]) / 1e3
        out[name] = {"kernel_saved_ms_per_step": saved_ms, "collectives_ms_per_step": comm_ms,
                     "net_saved_ms_per_step": saved_ms - comm_ms,
                     "unsharded_ms_per_step": layers * unsharded_us / 1e3}
    return out


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def run(*, S: int = 185_000, T: int = 8, heads_per_rank: int = 8, ranks=(2, 4, 8), page: int = 1,
        tree: str = "ddtree", seed: int = 41, device: str = "cuda", ops=None, timing: bool = True,
        oracle: bool = True, tol: float = 1e-2, log=print, timer=None) -> dict:
    """The simulation's results (kernel/gpu_run.py writes them as dcp-sim-<gpu>-<stamp>.json).
    ops: the kernel module (kernel.ops by default; tests pass the CPU stand-in);
    timer: (time_calls, L2 bytes), default kernel.bench.timing.time_calls and this GPU's L2."""
    if ops is None:
        from .. import ops as ops_module
        ops = ops_module
    res = {"kind": "dcp-sim", "layers": LAYERS, "tol": tol,
           "shape": {"S": S, "T": T, "heads_per_rank": heads_per_rank, "batch": 1, "tree": tree,
                     "page_size": page, "layout": "scattered", "kv_dtype": "bfloat16"},
           "what": __doc__.strip().splitlines()[0],
           "units": {"time": "microseconds per layer (CUDA-graph replay medians) unless *_ms_per_step",
                     "bytes": "per rank and layer, sent (= received)"},
           "assumed_links": ASSUMED_LINKS, "rows": []}
    if timing and timer is None:
        from ..bench.timing import time_calls
        timer = (time_calls, torch.cuda.get_device_properties(0).L2_cache_size)
    unsharded_us = None
    for n in ranks:
        H = heads_per_rank * n
        case = make_case([S], [T], H, tree=tree, layout="scattered", page_size=page * n, seed=seed + n, device=device)
        log(f"dcp-sim: N={n}: S={S}, T={T}, {H} heads ({heads_per_rank} per rank), widened page {page * n}")
        full_out = torch.empty(T, H, V_DIM, dtype=torch.bfloat16, device=device)
        full_lse = torch.empty(T, H, dtype=torch.float32, device=device)
        ws = ops.get_workspace(case.q.device)
        ops.verify_attention(*case.args(), out=full_out, lse_out=full_lse, workspace=ws, max_draft_len=T)
        sim_out, sim_ranks = simulate(ops, case, n, heads_per_rank, T)
        row = {"N": n, "heads_gathered": H, "shard_lens": [int(rk.kv_indptr[-1]) for rk in sim_ranks],
               "rel_err_vs_unsharded": _rel(sim_out, full_out), "finite": bool(torch.isfinite(sim_out).all()),
               "collective_bytes_per_layer": collective_bytes(T, heads_per_rank, n),
               "kv_bytes_per_token_per_rank": LAYERS * HEAD_DIM * 2 / n}
        if oracle:
            ref = verify_attention_reference(*case.args())[0]
            row["rel_err_vs_oracle"] = _rel(sim_out, ref)
            row["unsharded_rel_err_vs_oracle"] = _rel(full_out, ref)
            del ref
        row["pass"] = row["finite"] and row["rel_err_vs_unsharded"] < tol and row.get("rel_err_vs_oracle", 0) < tol
        log(f"dcp-sim: N={n}: rel err vs unsharded {row['rel_err_vs_unsharded']:.2e}"
            + (f", vs oracle {row['rel_err_vs_oracle']:.2e}" if oracle else "") + f", shards {row['shard_lens']}")
        if timing:
            row.update(_time(case, sim_ranks, ops, ws, heads_per_rank, T, timer[1], timer[0], log))
            if unsharded_us is None:
                unsharded_us = row["unsharded_us"]
            row["estimate"] = estimate(row["unsharded_us"], row["rank_us_max"], row["epilogue_us"],
                                       row["collective_bytes_per_layer"])
            log(f"dcp-sim: N={n}: unsharded {row['unsharded_us']:.1f} us, rank max {row['rank_us_max']:.1f} us "
                f"(draft {row['draft_us']:.1f} + prefix {row['prefix_us']:.1f}), epilogue {row['epilogue_us']:.1f} us")
        res["rows"].append(row)
        del case, sim_ranks, sim_out, full_out
        if device == "cuda":
            torch.cuda.empty_cache()
    res["all_pass"] = all(r["pass"] for r in res["rows"])
    return res


def _time(case, ranks, ops, ws, heads, T, l2, time_calls, log) -> dict:
    """Medians (us) of: one rank's call today (its heads over the whole prefix), each simulated
    rank's two calls, rank 0's draft and prefix calls alone, and the epilogue; rotating pool copies."""
    pool_bytes = case.kv_indices.numel() * HEAD_DIM * 2

    def copies_of(t, nbytes):
        out = [t]
        while len(out) < 4 and len(out) * nbytes < 3 * l2:
            out.append(t.clone())
        return out

    q_rank = case.q[:, :heads].contiguous()
    out = torch.empty(T, heads, V_DIM, dtype=torch.bfloat16, device=case.q.device)
    lse = torch.empty(T, heads, dtype=torch.float32, device=case.q.device)
    fulls = copies_of(case.kv_cache, pool_bytes)

    def unsharded(p):
        ops.verify_attention(q_rank, p, case.kv_indptr, case.kv_indices, case.k_extend, case.custom_mask,
                             case.mask_indptr, case.qo_indptr, case.sm_scale, out=out, lse_out=lse, workspace=ws,
                             max_draft_len=T)
    res = {"unsharded_us": 1e3 * time_calls([lambda p=p: unsharded(p) for p in fulls])}
    del fulls
    per_rank = []
    for i, rk in enumerate(ranks):
        pools = copies_of(rk.pool, pool_bytes // len(ranks))
        per_rank.append(1e3 * time_calls([lambda p=p, rk=rk: (rk.draft_call(p), rk.prefix_call(p)) for p in pools]))
        if i == 0:
            res["draft_us"] = 1e3 * time_calls([lambda p=p: rk.draft_call(p) for p in pools])
            res["prefix_us"] = 1e3 * time_calls([lambda p=p: rk.prefix_call(p) for p in pools])
        del pools
    p_out = torch.zeros_like(ranks[0].acc)
    p_lse = torch.zeros_like(ranks[0].draft_lse)
    res["epilogue_us"] = 1e3 * time_calls([lambda: (ranks[0].prefix_f32.copy_(ranks[0].prefix_out),
                                                    ranks[0].epilogue(p_out, p_lse))])
    res["rank_us"] = per_rank
    res["rank_us_max"] = max(per_rank)
    res["speedup_kernel_only"] = res["unsharded_us"] / (res["rank_us_max"] + res["epilogue_us"])
    log(f"dcp-sim: per-rank two-call times {', '.join(f'{t:.1f}' for t in per_rank)} us")
    return res


def summary_lines(res: dict) -> list[str]:
    """One line per N for gpu_run's table."""
    lines = []
    for r in res["rows"]:
        if "unsharded_us" in r:
            est = r["estimate"]
            lines.append(f"dcp-sim N={r['N']}: unsharded {r['unsharded_us']:.1f} us/layer, rank {r['rank_us_max']:.1f}"
                         f" + epilogue {r['epilogue_us']:.1f} us, collectives {r['collective_bytes_per_layer']['total']}"
                         f" B/layer; net saving per step NVLink {est['nvlink-h200']['net_saved_ms_per_step']:.2f} ms, "
                         f"PCIe5 {est['pcie-gen5']['net_saved_ms_per_step']:.2f} ms; err {r['rel_err_vs_unsharded']:.1e}")
        else:
            lines.append(f"dcp-sim N={r['N']}: err {r['rel_err_vs_unsharded']:.1e} pass={r['pass']}")
    return lines

