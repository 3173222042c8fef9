"""The EXTEND bench's pieces without a GPU (kernel/bench/extend_bench.py): the prefill's chunks
cover the prompt once, a chunk's case is the pool's first slots and tokens, and its rows carry
the bench sweeps' fields with causal FLOPs."""
import pytest
import torch

from kernel.bench import extend_bench as eb
from kernel.bench.sweeps import roofline_us, traffic
from kernel.inputs import make_case
from kernel.reference import verify_attention_reference

# the fields every row of kernel/bench/sweeps.py's bench() carries (phase 2 reads these)
SWEEP_FIELDS = {"sweep", "S", "prefix_lens", "T", "H", "layout", "page_size", "batch", "impl", "tier", "kv_dtype",
                "time_us", "bytes", "flops", "GBps", "TFLOPs", "roofline_us", "frac_roofline"}


def test_prefill_chunks_cover_the_prompt_once():
    chunks = eb.prefill_chunks()
    assert chunks[0] == (0, 8192) and chunks[-1] == (180224, 4776) and len(chunks) == 23
    assert all(s == i * 8192 for i, (s, _) in enumerate(chunks)) and sum(t for _, t in chunks) == 185000
    assert eb.prefill_chunks(20, 8) == [(0, 8), (8, 8), (16, 4)]


def test_sub_case_is_the_pools_first_slots_and_tokens():
    case = make_case([50], [12], 2, causal=True, seed=4)
    c = eb.sub_case(case, 20, 5)
    o, _ = verify_attention_reference(*c.args())
    # the same as a case built from those slots and rows directly
    want, _ = verify_attention_reference(case.q[:5], case.kv_cache, torch.tensor([0, 20]), case.kv_indices[:20],
                                         case.k_extend[:5], None, None, torch.tensor([0, 5]), case.sm_scale)
    assert torch.equal(o, want) and c.meta["prefix_lens"] == [20] and c.meta["draft_lens"] == [5]
    assert case.meta["prefix_lens"] == [50]          # the big case is left as it was


@pytest.mark.parametrize("kv", eb.KV_DTYPES)
def test_rows_carry_the_sweep_fields_and_causal_flops(kv):
    r = eb._row("extend_T", 185000, 8192, kv, "flash", 8, 150000.0, 4000.0, 600.0)
    assert SWEEP_FIELDS <= set(r) and r["mode"] == "extend"
    assert r["flops"] == 8 * (8192 * 185000 + 8192 * 8193 // 2) * 2 * 1088
    assert r["bytes"] == traffic([185000], 8192, 8, kv)["bytes"]
    assert r["roofline_us"] == pytest.approx(roofline_us(r["bytes"], r["flops"], 4000.0, 600.0))
    assert r["kv_dtype"] == ("bfloat16" if kv == "auto" else "fp8_e4m3")


def test_summary_lists_the_t_rows_and_each_prefill_sum():
    rows = [eb._row("extend_T", 185000, 2, "auto", "flash", 2, 80.0, 4000.0, 600.0),
            eb._row("fp8_extend_T", 185000, 2, "fp8_e4m3", "sglang_extend", None, 24000.0, 4000.0, 600.0),
            eb._row("extend_prefill185k", 0, 8192, "auto", "flash", 8, 4000.0, 4000.0, 600.0)]
    prefill = {"bfloat16 flash": dict(kv_dtype="bfloat16", impl="flash", chunks=23, chunk_tokens=8192,
                                      prompt_tokens=185000, time_ms_per_layer=1700.0, flops=3e14, TFLOPs=176.0)}
    lines = eb.summary_lines({"rows": rows, "prefill_185k": prefill})
    assert len(lines) == 3 and "sglang_extend" in lines[1]
    assert lines[2] == "extend prefill 185000 tokens (bfloat16 flash, 23 chunks of 8192): 1700.0 ms a layer, 176 TF/s"


def test_the_other_tier_is_never_the_default_of_a_prefill_chunk():
    from kernel.bench.extend_bench import ALT_TIER, CHUNK, H, prefill_chunks
    from kernel.bench.extend_validate import FP8_KV
    from kernel.ops import pick_tier
    for kv, alt in ALT_TIER.items():
        for _, T in prefill_chunks():
            assert alt != pick_tier(H, T, 1, T, kv_fp8=kv == FP8_KV), (kv, T, CHUNK)
