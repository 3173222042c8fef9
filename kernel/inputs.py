"""Seeded generators of TARGET_VERIFY inputs in SGLang's layout, reused by every test,
validation run and benchmark.

Draft trees: chain, star, random parents, and DDTree-like best-first trees under a node
budget; any of them padded to a fixed width with padding nodes (`tree_sizes`), as DDTree
(SGLang pull request #29907) verifies D = budget + 1 nodes per request whatever its tree's
size. The production algorithm's shapes: `ddtree_case` and `dflash_case`. Pools: contiguous, scattered (at any page size; page 1 is SGLang's default),
and fragmented by simulated allocate/free churn. Every pool slot that no prefix token
owns (the padding page, free slots, the draft tokens' own slots) holds NaN, so a stray
read poisons the output instead of passing silently.

KV pools: the model dtype (`kv_dtype="auto"`, SGLang's default) or SGLang's fp8 pool
(`kv_dtype="fp8_e4m3"`: float8_e4m3fn rows written as SGLang writes them, kernel/fp8.py;
NaN poison is the e4m3fn NaN byte 0x7f there). An fp8 case records k_scale / v_scale,
which the oracle needs: `verify_attention_reference(*case.args(), **case.kwargs())`.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import torch

from .checks import HEAD_DIM, VerifyInputError
from .fp8 import FP8, FP8_MAX, FP8_NAN_BYTES, check_scale, quantize_mla_rows

TREES = ("chain", "star", "random", "ddtree")
LAYOUTS = ("contiguous", "scattered", "fragmented")
KV_DTYPES = ("auto", "fp8_e4m3")  # SGLang's --kv-cache-dtype names; auto = the model dtype
SM_SCALE = 192 ** -0.5  # DeepSeek-V3 / Kimi-K2: (qk_nope 128 + rope 64) ** -0.5, no YaRN mscale


def tree_parents(kind: str, T: int, gen: torch.Generator) -> list[int]:
    """Parent of each of T draft nodes (-1 for the root, node 0); parents precede children."""
    if T < 1:
        raise VerifyInputError(f"T: need at least one draft node, got {T}")
    if kind == "chain":
        return [-1] + list(range(T - 1))
    if kind == "star":
        return [-1] + [0] * (T - 1)
    if kind == "random":
        return [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, T)]
    if kind == "ddtree":
        # Best-first expansion as DDTree does: each node's children take a decreasing share
        # of its probability; the T most probable prefixes of the draft distribution win.
        parents: list[int] = []
        heap = [(-1.0, 0, -1)]  # (-path probability, tie-break, parent node)
        tick = 1
        while heap and len(parents) < T:
            negp, _, par = heapq.heappop(heap)
            node = len(parents)
            parents.append(par)
            shares = torch.rand(4, generator=gen).sort(descending=True).values
            shares = shares / shares.sum() * 0.9
            for s in shares.tolist():
                heapq.heappush(heap, (negp * s, tick, node))
                tick += 1
        return parents
    raise VerifyInputError(f"tree: unknown kind {kind!r} (expected one of {', '.join(TREES)})")


def ancestor_mask(parents: list[int]) -> torch.Tensor:
    """[T, T] bool: row i is True at i and at every ancestor of i."""
    T = len(parents)
    m = torch.zeros(T, T, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            m[i] = m[p]
        m[i, i] = True
    return m


def _pool_slots(layout: str, prefix_lens: list[int], page_size: int, gen: torch.Generator,
                slack: float) -> tuple[int, list[torch.Tensor]]:
    """Number of pool slots and the per-token slot ids of each request's prefix."""
    P = page_size
    pages_per_req = [-(-s // P) for s in prefix_lens]
    need = sum(pages_per_req)
    total_pages = 1 + need + int(need * slack) + 1  # page 0 is SGLang's padding page
    if layout == "contiguous":
        order = torch.arange(1, 1 + need)
    elif layout == "scattered":
        order = torch.randperm(total_pages - 1, generator=gen)[:need] + 1
    elif layout == "fragmented":
        # SGLang-like free list: allocation pops from the front, frees append at the back.
        # Churn with short-lived requests, then allocate ours from what is left.
        free = list(range(1, total_pages))
        live: list[list[int]] = []
        spare = total_pages - 1 - need
        for _ in range(64):
            n = int(torch.randint(1, max(2, spare // 8 + 2), (1,), generator=gen))
            if n <= len(free) - need:
                live.append(free[:n])
                del free[:n]
            if live and float(torch.rand(1, generator=gen)) < 0.7:
                free.extend(live.pop(int(torch.randint(0, len(live), (1,), generator=gen))))
        order = torch.tensor(free[:need], dtype=torch.long)
    else:
        raise VerifyInputError(f"layout: unknown {layout!r} (expected one of {', '.join(LAYOUTS)})")
    slots, at = [], 0
    for s, n in zip(prefix_lens, pages_per_req):
        pages = order[at: at + n]
        at += n
        tok = (pages[:, None] * P + torch.arange(P)[None, :]).flatten()[:s]
        slots.append(tok)
    return total_pages * P, slots


@dataclass
class VerifyCase:
    """One TARGET_VERIFY call's inputs, exactly as SGLang's Triton backend passes them."""
    q: torch.Tensor            # [N, H, 576]
    kv_cache: torch.Tensor     # [num_slots, 1, 576], NaN where no prefix token lives
    kv_indptr: torch.Tensor    # [bs + 1] int32
    kv_indices: torch.Tensor   # [sum S_b] int64
    k_extend: torch.Tensor     # [N, 1, 576]
    custom_mask: torch.Tensor | None  # flattened FULL_MASK, uint8
    mask_indptr: torch.Tensor | None  # [bs + 1] int64
    qo_indptr: torch.Tensor    # [bs + 1] int32
    sm_scale: float
    meta: dict = field(default_factory=dict)
    k_scale: float | None = None   # fp8 pools: the layer's k_scale (SGLang's k_scale_float)
    v_scale: float | None = None   # fp8 pools: the layer's v_scale

    def args(self) -> tuple:
        """Positional arguments of verify_attention / verify_attention_reference."""
        return (self.q, self.kv_cache, self.kv_indptr, self.kv_indices, self.k_extend,
                self.custom_mask, self.mask_indptr, self.qo_indptr, self.sm_scale)

    def kwargs(self) -> dict:
        """Keyword arguments the oracle needs besides `args()`: {} for a model-dtype pool,
        {"k_scale": .., "v_scale": ..} for an fp8 pool (floats, SGLang's descales)."""
        if self.k_scale is None and self.v_scale is None:
            return {}
        return {"k_scale": self.k_scale, "v_scale": self.v_scale}


def make_case(prefix_lens, draft_lens, heads: int = 8, *, tree: str = "random", layout: str = "scattered",
              page_size: int = 1, seed: int = 0, dtype=torch.bfloat16, device="cpu", slack: float = 0.5,
              causal: bool = False, kv_dtype: str = "auto", k_scale: float | None = None,
              v_scale: float | None = None, tree_sizes=None) -> VerifyCase:
    """Build a seeded, reproducible ragged verify batch.

    prefix_lens / draft_lens: per-request S_b and T_b (lists of equal length).
    causal=True passes custom_mask=None (SGLang's chain verify without a mask).
    tree_sizes: per-request node counts n_b, 1 <= n_b <= T_b (None: n_b = T_b). Request b's
      tree is its first n_b draft tokens; the T_b - n_b after them are padding nodes, whose
      mask rows are all False, prefix columns and own diagonal included, exactly as DDTree's
      `_build_flat_tree_mask` writes them (they attend to the prefix only: reference.py).
    dtype: q, k_extend and (kv_dtype="auto") the pool.
    kv_dtype="fp8_e4m3": the pool is float8_e4m3fn [num_slots, 1, 576] (what SGLang's
      get_key_buffer hands its kernels), the prefix rows drawn in `dtype` and quantized with
      k_scale as SGLang writes them. k_scale defaults to max |row| / 448 over the prefix rows
      (1.0, SGLang's default, when there are none), so the full e4m3 range is used and a
      kernel that ignores the scale fails; v_scale defaults to k_scale (SGLang duplicates a
      single checkpoint kv_scale). The same seed gives the same rows, q and tree as "auto".
    """
    prefix_lens, draft_lens = [int(s) for s in prefix_lens], [int(t) for t in draft_lens]
    if len(prefix_lens) != len(draft_lens) or not prefix_lens:
        raise VerifyInputError(f"draft_lens: {len(draft_lens)} entries for {len(prefix_lens)} prefix lengths")
    if page_size < 1:
        raise VerifyInputError(f"page_size: must be >= 1, got {page_size}")
    sizes = list(draft_lens) if tree_sizes is None else [int(n) for n in tree_sizes]
    if tree_sizes is not None and causal:
        raise VerifyInputError("tree_sizes: padding nodes need a mask; causal=True passes none")
    if len(sizes) != len(draft_lens) or any(not 1 <= n <= t for n, t in zip(sizes, draft_lens) if t):
        raise VerifyInputError(f"tree_sizes: {tree_sizes!r} is not one node count 1 <= n_b <= T_b per request "
                               f"(draft_lens {draft_lens})")
    if kv_dtype not in KV_DTYPES:
        raise VerifyInputError(f"kv_dtype: unknown {kv_dtype!r} (expected one of {', '.join(KV_DTYPES)})")
    fp8 = kv_dtype == "fp8_e4m3"
    if not fp8 and (k_scale is not None or v_scale is not None):
        raise VerifyInputError(f"{'k_scale' if k_scale is not None else 'v_scale'}: scales are for "
                               f"kv_dtype='fp8_e4m3', got kv_dtype={kv_dtype!r} with "
                               f"k_scale={k_scale!r}, v_scale={v_scale!r}")
    if k_scale is not None:
        k_scale = check_scale("k_scale", k_scale)
    if v_scale is not None:
        v_scale = check_scale("v_scale", v_scale)
    gen = torch.Generator().manual_seed(seed)
    num_slots, slots = _pool_slots(layout, prefix_lens, page_size, gen, slack)
    N = sum(draft_lens)
    dgen = torch.Generator(device=device).manual_seed(seed + 1)

    def rnd(*shape):
        return torch.randn(*shape, generator=dgen, device=device, dtype=torch.float32).to(dtype)

    kv_indices = torch.cat(slots).to(device) if slots else torch.empty(0, dtype=torch.long, device=device)
    rows = rnd(kv_indices.numel(), 1, HEAD_DIM) if kv_indices.numel() else None
    if fp8:
        kv_cache, k_scale = fp8_pool(num_slots, kv_indices, rows, k_scale, device)
    else:
        kv_cache = torch.full((num_slots, 1, HEAD_DIM), float("nan"), dtype=dtype, device=device)
        if rows is not None:
            kv_cache[kv_indices] = rows
    if fp8:
        k_scale = 1.0 if k_scale is None else k_scale
        v_scale = k_scale if v_scale is None else v_scale
    q = rnd(N, heads, HEAD_DIM)
    k_extend = rnd(N, 1, HEAD_DIM)
    kv_indptr = torch.tensor([0] + prefix_lens, dtype=torch.int64).cumsum(0).to(torch.int32).to(device)
    qo_indptr = torch.tensor([0] + draft_lens, dtype=torch.int64).cumsum(0).to(torch.int32).to(device)
    trees, masks, cells = [], [], [0]
    for S, T, n in zip(prefix_lens, draft_lens, sizes):
        parents = tree_parents("chain" if causal else tree, n, gen) if T else []
        trees.append(parents)
        cells.append(T * (S + T))
        if causal or T == 0:
            continue
        block = torch.zeros(T, S + T, dtype=torch.uint8)   # rows n.. : padding nodes, all False
        block[:n, :S] = 1
        block[:n, S:S + n] = ancestor_mask(parents).to(torch.uint8)
        masks.append(block.flatten())
    custom_mask = mask_indptr = None
    if not causal:
        custom_mask = (torch.cat(masks) if masks else torch.empty(0, dtype=torch.uint8)).to(device)
        mask_indptr = torch.tensor(cells, dtype=torch.int64).cumsum(0).to(device)
    meta = dict(prefix_lens=prefix_lens, draft_lens=draft_lens, heads=heads, tree="chain" if causal else tree,
                layout=layout, page_size=page_size, seed=seed, parents=trees, causal=causal, kv_dtype=kv_dtype)
    if tree_sizes is not None:
        meta["tree_sizes"] = sizes
    return VerifyCase(q, kv_cache, kv_indptr, kv_indices, k_extend, custom_mask, mask_indptr, qo_indptr,
                      SM_SCALE, meta, k_scale, v_scale)


def fp8_pool(num_slots: int, kv_indices: torch.Tensor, rows: torch.Tensor | None, k_scale: float | None,
             device) -> tuple[torch.Tensor, float | None]:
    """An fp8 MLA pool as SGLang holds it: float8_e4m3fn [num_slots, 1, 576] over uint8 bytes, every
    slot the e4m3fn NaN byte but kv_indices', which take rows ([n, 1, 576], model dtype) written as
    SGLang writes them with k_scale (None: max |row| / 448, so the full e4m3 range is used).
    Returns (pool, k_scale); k_scale stays None when there are no rows."""
    # writing through the byte view also avoids index_put on fp8, which not every torch build implements
    pool = torch.full((num_slots, 1, HEAD_DIM), FP8_NAN_BYTES[0], dtype=torch.uint8, device=device)
    if rows is not None:
        if k_scale is None:
            k_scale = float(rows.abs().max()) / FP8_MAX
        pool[kv_indices] = quantize_mla_rows(rows, k_scale).view(torch.uint8)
    return pool.view(FP8), k_scale


def random_case(seed: int, *, max_prefix: int = 300, max_draft: int = 24, max_batch: int = 4,
                max_heads: int = 16, dtype=torch.bfloat16, device="cpu", kv_dtype: str = "auto") -> VerifyCase:
    """A random configuration across every generator and layout (for sweeps of many cases);
    kv_dtype as in `make_case` (the same seed draws the same configuration for either)."""
    g = torch.Generator().manual_seed(10_000 + seed)

    def pick(seq):
        return seq[int(torch.randint(0, len(seq), (1,), generator=g))]

    bs = int(torch.randint(1, max_batch + 1, (1,), generator=g))
    prefix = [int(torch.randint(0, max_prefix + 1, (1,), generator=g)) for _ in range(bs)]
    draft = [int(torch.randint(1, max_draft + 1, (1,), generator=g)) for _ in range(bs)]
    heads = pick([h for h in (1, 2, 4, 8, 16, 32, 64, 128) if h <= max_heads])
    return make_case(prefix, draft, heads, tree=pick(TREES), layout=pick(LAYOUTS), page_size=pick([1, 16, 64]),
                     seed=seed, dtype=dtype, device=device, causal=pick([False] * 5 + [True]), kv_dtype=kv_dtype)


def ddtree_case(prefix_lens, budget: int, heads: int = 8, *, topk: int = 2, tree_sizes=None, seed: int = 0,
                **kw) -> VerifyCase:
    """A TARGET_VERIFY batch shaped as DDTree (SGLang pull request #29907) builds it: every request
    verifies D = budget + 1 nodes (the root and at most `budget` drafted ones); request b's tree is
    its first n_b of them, the rest padding nodes (all-False mask rows); page 1 scattered slots
    unless `kw` says otherwise (the pull request refuses page sizes other than 1).

    topk: 1 = DDTree's spine (a chain), 2 = its full tree (best-first under the budget, the
      "ddtree" generator); DDTreeVerifyInput.topk takes the same values.
    tree_sizes: n_b per request, 1 <= n_b <= D; None draws them from `seed`, uniformly in 1..D.
    Other keywords go to make_case (dtype, device, kv_dtype, layout, ...)."""
    if not isinstance(budget, int) or budget < 1:
        raise VerifyInputError(f"budget: DDTree's node budget must be an int >= 1, got {budget!r}")
    if topk not in (1, 2):
        raise VerifyInputError(f"topk: 1 (spine, a chain) or 2 (full tree), got {topk!r}")
    D = budget + 1
    if tree_sizes is None:
        g = torch.Generator().manual_seed(20_000 + seed)
        tree_sizes = [int(torch.randint(1, D + 1, (1,), generator=g)) for _ in prefix_lens]
    case = make_case(prefix_lens, [D] * len(prefix_lens), heads, tree="chain" if topk == 1 else "ddtree",
                     seed=seed, tree_sizes=tree_sizes, **kw)
    case.meta.update(algorithm="DDTREE", budget=budget, topk=topk)
    return case


def dflash_case(prefix_lens, block: int, heads: int = 8, *, seed: int = 0, **kw) -> VerifyCase:
    """A TARGET_VERIFY batch shaped as SGLang's DFLASH verifies it: every request a block of
    `block` tokens (its --speculative-dflash-block-size) in a causal chain, with no mask
    (custom_mask=None: dflash_worker_v2 passes none and the triton backend reads None as causal).
    Other keywords go to make_case."""
    if not isinstance(block, int) or block < 1:
        raise VerifyInputError(f"block: DFLASH's block size must be an int >= 1, got {block!r}")
    case = make_case(prefix_lens, [block] * len(prefix_lens), heads, seed=seed, causal=True, **kw)
    case.meta.update(algorithm="DFLASH", block=block)
    return case


def sink_case(prefix_len: int, draft_len: int, gap: float, heads: int = 8, *, seed: int = 0, device="cpu",
              kv_dtype: str = "auto", dtype=torch.bfloat16) -> VerifyCase:
    """One request whose first prefix key is an attention sink: its logit `gap` nats above the
    other keys' mean for every query row and head, theirs spread by 0.5 nats, and the other rows'
    V (their first 512 dims) sharing one direction, so that the tail behind the sink carries what
    the sink does not (at 185k keys and gap 11 most of the mass). A kernel that rounds small P
    away (an e4m3 P: SGLang's fp8 prefix path) loses that tail (kernel/bench/fp8_mma_precision.py).

    Built as make_case's case of the same seed and dtype (chain mask, page 1 scattered), then:
    q = 8 e + 0.01 noise (e a random unit vector, the same for every row), tail rows = r s + mu (r
    the drawn rows, s = 0.5 / (8 sm_scale), mu ~ N(0, s^2) in the 512 V dims, orthogonal to e), the
    sink row = gap / (8 sm_scale) e; draft rows r s. kv_dtype="fp8_e4m3" quantizes the rows as
    SGLang writes them, k_scale = max |row| / 448 (v_scale the same). dtype: q, k_extend and a bf16
    pool's rows, as make_case's."""
    if not prefix_len >= 2 or not draft_len >= 1:
        raise VerifyInputError(f"prefix_len, draft_len: a sink and a tail need prefix_len >= 2 and draft_len >= 1, "
                               f"got {prefix_len}, {draft_len}")
    if kv_dtype not in KV_DTYPES:
        raise VerifyInputError(f"kv_dtype: unknown {kv_dtype!r} (expected one of {', '.join(KV_DTYPES)})")
    c = make_case([prefix_len], [draft_len], heads, seed=seed, device=device, causal=True, dtype=dtype)
    g = torch.Generator().manual_seed(30_000 + seed)
    e = torch.randn(HEAD_DIM, generator=g, dtype=torch.float64)
    e /= e.norm()
    s = 0.5 / (8 * SM_SCALE)
    mu = torch.zeros(HEAD_DIM, dtype=torch.float64)
    mu[:512] = torch.randn(512, generator=g, dtype=torch.float64) * s
    mu -= (mu @ e) * e                                   # no logit shift for the tail
    noise = torch.randn(c.q.shape, generator=g, dtype=torch.float64) * 0.01
    c.q = (8 * e + noise).to(c.q.dtype).to(device)
    rows = c.kv_cache[c.kv_indices].double().cpu()
    rows = rows * s + mu
    rows[0, 0] = gap / (8 * SM_SCALE) * e
    c.k_extend = (c.k_extend.double() * s).to(c.k_extend.dtype)
    if kv_dtype == "fp8_e4m3":
        k_scale = float(rows.abs().max()) / FP8_MAX        # of the float64 rows, before their rounding
        c.kv_cache, c.k_scale = fp8_pool(c.kv_cache.shape[0], c.kv_indices, rows.to(dtype).to(device), k_scale, device)
        c.v_scale = k_scale
    else:
        c.kv_cache[c.kv_indices] = rows.to(c.kv_cache.dtype).to(device)
    c.meta.update(sink_gap=gap, kv_dtype=kv_dtype)
    return c
