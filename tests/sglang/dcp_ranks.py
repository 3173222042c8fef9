"""Spawned DCP ranks for the CPU tests: `run_group(world, jobs)` starts `world` processes that
join one gloo group as SGLang's DCP ranks (kernel/sglang/dcp_harness.py), run every job, and
leave each rank's results in a file; the parent waits at most `timeout` seconds.

A job is a dict: name, kind, and the case (make_case arguments, widened: pages of page * world
slots). Kinds:
  flash-verify   TARGET_VERIFY through the plugin's DCP path (eager), bf16, CPU stand-in kernel
  flash-graph    the same in the CUDA-graph form: capture at the pool's batch, replay a second case
  sglang-extend  SGLang's own DCP path (_forward_extend_dcp, custom_mask None): the case's drafts
                 as a causal EXTEND after the prefix, float32, Triton interpreter
  triton-verify  TARGET_VERIFY on SGLang's own arm (save_kv_cache as the job says): the error it raises
  flash-extend-write  an EXTEND with its KV write on the flash arm: the pool rows written
  triton-extend  the same EXTEND on SGLang's own arm: the error it raises
  sglang-merge   SGLang's cp_lse_ag_out_rs_mha on seeded partials (merge_inputs): this rank's result
  flash-accept   a tree verify, then SGLang's accept move of each request's path (accept_paths)
"""
from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def case_of(job: dict, world: int):
    from kernel.inputs import make_case

    c = dict(job["case"])
    prefix = c.pop("prefix_lens")
    draft = c.pop("draft", 4)
    heads = c.pop("heads", 2) * world
    page = c.pop("page_size", 1)
    return make_case(prefix, [draft] * len(prefix), heads, page_size=page * world, **c)


def _harness(job, rank, world, **kw):
    from kernel.sglang.dcp_harness import DcpHarness

    c = job["case"]
    return DcpHarness(rank=rank, world=world, heads=c.get("heads", 2), page_size=c.get("page_size", 1),
                      draft=c.get("draft", 4), max_bs=4, context=1024, pool_slots=4096, **kw)


def _run(job, rank, world):
    from cpu_ops import CpuOps

    from kernel.sglang import adapter

    kind = job["kind"]
    if kind == "sglang-merge":
        return _sglang_merge(job, rank, world)
    case = case_of(job, world)
    if kind == "flash-accept":
        return _accept(job, case, rank, world)
    if kind in ("flash-verify", "flash-graph", "flash-extend-write"):
        ops = CpuOps()
        adapter.use_ops(ops)
        h = _harness(job, rank, world, arm="flash")
        if kind == "flash-verify":
            adapter.calls.clear()
            out = h.run_eager(case).float()
            return {"out": out, "kernel_calls": len(ops.calls), "flash_calls": adapter.calls["flash"]}
        if kind == "flash-graph":
            first = h.capture(case, graph_bs=4).float()
            ptrs = [c["kv_indices"].data_ptr() for c in ops.calls]
            ops.calls.clear()
            second = case_of(dict(job, case=job["second"]), world)
            again = h.replay(second).float()
            return {"out": first, "out2": again, "ptrs": ptrs, "ptrs2": [c["kv_indices"].data_ptr() for c in ops.calls]}
        h.run_extend(case, save_kv_cache=True)   # (its attention runs SGLang's bf16 kernel: not checked)
        loc = h._draft_slots(case.q.shape[0])
        mine = loc[loc % world == rank]
        return {"rows": h.layer_pool(0)[mine // world].float(), "slots": mine}
    if kind == "sglang-extend":
        h = _harness(job, rank, world, arm="triton", dtype=torch.float32)
        return {"out": h.run_extend(case)}
    if kind == "triton-extend":
        h = _harness(job, rank, world, arm="triton")
        try:
            h.run_extend(case, save_kv_cache=True)
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"}
        return {"error": None}
    if kind == "triton-verify":
        h = _harness(job, rank, world, arm="triton")
        fb = h._load(case)
        h.backend.init_forward_metadata(fb)
        q, k = (x[0] for x in h.layer_inputs(case))
        try:
            h.backend.forward_extend(q.reshape(q.shape[0], -1), k, k[..., :512].contiguous(), h.layer, fb,
                                     save_kv_cache=job.get("save_kv_cache", True))
        except Exception as e:   # what SGLang raises is the result
            return {"error": f"{type(e).__name__}: {e}"}
        return {"error": None}
    raise ValueError(f"job kind: unknown {kind!r}")


def accept_paths(case) -> list[list[int]]:
    """Per request, the accepted draft path of the verify: root to a deepest node."""
    from kernel.sglang.dcp_harness import depths

    paths = []
    for parents in case.meta["parents"]:
        d = depths(parents)
        node, path = d.index(max(d)), []
        while node >= 0:
            path.append(node)
            node = parents[node]
        paths.append(path[::-1])
    return paths


def _accept(job, case, rank, world):
    """Verify a tree on the flash arm (its draft rows written), then SGLang's accept move
    (move_accept_tokens_to_target_kvcache) of each request's path: first with SGLang's own
    MLATokenToKVPool.move_kv_cache (its outcome), then, from the same pool, with the plugin's."""
    import types

    from cpu_ops import CpuOps
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool
    from sglang.srt.speculative.spec_utils import move_accept_tokens_to_target_kvcache

    from kernel.sglang import adapter

    adapter.use_ops(CpuOps())
    h = _harness(job, rank, world, arm="flash")
    h.run_eager(case)
    T = case.meta["draft_lens"][0]
    paths = accept_paths(case)
    width = max(len(p) for p in paths)
    accept_index = torch.tensor([[b * T + n for n in p] + [-1] * (width - len(p)) for b, p in enumerate(paths)],
                                dtype=torch.int32)
    correct = torch.tensor([len(p) - 1 for p in paths], dtype=torch.int32)
    loc = h._draft_slots(case.q.shape[0])
    batch = types.SimpleNamespace(seq_lens=torch.tensor(case.meta["prefix_lens"]), out_cache_loc=loc)
    pool = h.pool
    saved = [buf.clone() for buf in pool.kv_buffer]

    def move():
        move_accept_tokens_to_target_kvcache(batch, accept_index, correct,
                                             types.SimpleNamespace(get_kvcache=lambda: pool))

    front = torch.cat([loc[b * T:b * T + len(p)] for b, p in enumerate(paths)])
    mine = front[front % world == rank]
    sglang_own = pool.move_kv_cache
    pool.move_kv_cache = types.MethodType(MLATokenToKVPool.move_kv_cache, pool)
    try:
        move()
        sglang = {"rows": pool.kv_buffer[0][mine // world].float()}
    except Exception as e:
        sglang = {"error": f"{type(e).__name__}: {e}"}
    pool.move_kv_cache = sglang_own
    for buf, s in zip(pool.kv_buffer, saved):
        buf.copy_(s)
    move()
    return {"rows": pool.kv_buffer[0][mine // world].float(), "slots": mine, "sglang": sglang}


def merge_inputs(job: dict, world: int):
    """Every rank's (out [N, H_all, 512] fp32, lse [N, H_all] fp32) of a merge job, seeded;
    some rows -inf (a shard that saw nothing) on some ranks."""
    g = torch.Generator().manual_seed(job["seed"])
    n, h = job["tokens"], job["heads"] * world
    outs = [torch.randn(n, h, 512, generator=g) for _ in range(world)]
    lses = [torch.randn(n, h, generator=g) * 3 for _ in range(world)]
    for r in range(1, world):
        lses[r][r % n] = float("-inf")
        outs[r][r % n] = 0.0
    return outs, lses


def _sglang_merge(job, rank, world):
    from sglang.srt.layers.dcp import cp_lse_ag_out_rs_mha
    from sglang.srt.runtime_context import get_parallel

    outs, lses = merge_inputs(job, world)
    out, lse = cp_lse_ag_out_rs_mha(outs[rank].clone(), lses[rank].clone(), get_parallel().dcp_group,
                                    return_lse=True)
    return {"out": out, "lse": lse}


def _process_setup() -> None:
    """What tests/conftest.py does for a pytest process: Triton's interpreter, the torchvision shim."""
    import importlib.util

    if "_tests_conftest" in sys.modules:
        return
    spec = importlib.util.spec_from_file_location("_tests_conftest", ROOT / "tests" / "conftest.py")
    module = sys.modules["_tests_conftest"] = importlib.util.module_from_spec(spec)   # keeps the shim alive
    spec.loader.exec_module(module)


def worker(rank, world, port, model_dir, jobs, out_dir):
    result = {}
    try:
        sys.path[:0] = [str(HERE), str(ROOT)]
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.pop("MLA_VERIFY_BACKEND", None)
        _process_setup()
        from sglang.srt.plugins import load_plugins

        from kernel.sglang.dcp_harness import init_rank

        draft = {j["case"].get("draft", 4) for j in jobs if "case" in j}
        if len(draft) != 1:
            raise ValueError(f"jobs: one group runs one draft length (SGLang's published setting), got {draft}")
        # each backend takes its page size from its (stand-in) model runner, as SGLang's does
        init_rank(rank, world, f"tcp://127.0.0.1:{port}", model_dir, draft_tokens=draft.pop())
        load_plugins()
        for job in jobs:
            t = time.time()
            try:
                result[job["name"]] = _run(job, rank, world)
            except Exception:
                result[job["name"]] = {"exception": traceback.format_exc()}
            result[job["name"]]["seconds"] = time.time() - t
    except Exception:
        result["__setup__"] = {"exception": traceback.format_exc()}
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_group(world: int, jobs: list[dict], model_dir, out_dir, timeout: float = 240.0) -> list[dict]:
    """Every rank's results ({job name: dict}), rank order; raises on a timeout or a crash."""
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=worker, args=(r, world, port, str(model_dir), jobs, str(out_dir)), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.time() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.time()))
    late = [r for r, p in enumerate(procs) if p.is_alive()]
    for r in late:
        procs[r].kill()       # our own children, by handle
        procs[r].join(5)
    if late:
        raise TimeoutError(f"DCP ranks {late} of {world} still running after {timeout:.0f} s")
    results = []
    for r, p in enumerate(procs):
        f = Path(out_dir) / f"rank{r}.pt"
        if not f.exists():
            raise RuntimeError(f"DCP rank {r} exited with {p.exitcode} and wrote no results")
        res = torch.load(f, weights_only=False)
        if "__setup__" in res:
            raise RuntimeError(f"DCP rank {r} failed to start:\n{res['__setup__']['exception']}")
        results.append(res)
    return results
