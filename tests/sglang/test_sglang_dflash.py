"""DFLASH on SGLang 0.5.23 reaches the plugin and is computed right (issue 24, problem 1).

SGLang's real DFlashVerifyInput as dflash_worker_v2 builds it (custom_mask None, draft_token_num
= the block size, its KVLocPlan planned over the block, the host bound seq_lens_sum = prefix +
block: kv_indices over-allocated) through the real TritonAttnBackend's metadata code, eager and
in the CUDA-graph form (padded to the captured batch, replayed with new lengths), into the
plugin's adapter (the CPU stand-in kernel): against the float64 oracle and SGLang's own arm."""
import pytest
import torch

from kernel.inputs import dflash_case
from kernel.sglang import adapter
from kernel.sglang.harness import DRAFT, Harness, oracle, publish_server_args, rel_err

BF16_TOL = 1e-2


@pytest.fixture
def block16():
    """The server's draft tokens per request = DFLASH's block (the published ServerArgs; set before
    the flash switch, whose strict check would refuse this CPU device)."""
    from conftest import MODEL_DIR
    publish_server_args(MODEL_DIR, device="cpu", draft_tokens=16)
    yield 16
    publish_server_args(MODEL_DIR, device="cpu", draft_tokens=DRAFT)


def _handover(call, case, block):
    assert call["custom_mask"] is None and call["mask_indptr"] is not None  # None = causal in the kernel
    assert call["max_draft_len"] == block                                 # the tier from the block size
    assert call["kv_indices"].dtype == torch.int64
    assert call["kv_indices"].numel() > case.kv_indices.numel()           # the worker's prefix + block bound
    assert call["lse_out"] is None and call["with_lse"] is False


def test_dflash_eager_through_the_real_backend(block16, flash):
    h = Harness(algorithm="DFLASH", draft=16)
    case = dflash_case([40, 0, 9], 16, 8, seed=1)
    adapter.calls.clear()
    o = h.run_eager(case)
    assert dict(adapter.calls) == {"flash": 1}
    assert type(h._load(case).spec_info).__name__ == "DFlashVerifyInput"
    _handover(flash.calls[-1], case, 16)
    assert torch.isfinite(o).all() and rel_err(o, oracle(case)) < BF16_TOL


def test_dflash_graph_form_pads_and_replays_new_lengths(block16, flash):
    h = Harness(algorithm="DFLASH", draft=16)
    first = dflash_case([30, 7], 16, 8, seed=2)
    adapter.calls.clear()
    o = h.capture(first, graph_bs=4)          # two dummy requests pad the captured batch
    _handover(flash.calls[-1], first, 16)
    assert flash.calls[-1]["q"].shape[0] == 4 * 16
    assert torch.isfinite(o).all() and rel_err(o, oracle(first)) < BF16_TOL
    second = dflash_case([64, 2, 19], 16, 8, seed=3)
    o2 = h.replay(second)
    assert dict(adapter.calls) == {"flash": 2}
    assert torch.isfinite(o2).all() and rel_err(o2, oracle(second)) < BF16_TOL


def test_dflash_flash_arm_agrees_with_sglangs_arm(block16, flash, bf16_interpreter):
    h = Harness(algorithm="DFLASH", draft=16)
    control = h.build_backend("triton")
    case = dflash_case([25, 11], 16, 8, seed=4)
    ours = h.run_eager(case)
    theirs = h.run_eager(case, backend=control)
    assert not control.use_verify_shared_kv and not hasattr(control, "mla_verify_backend")
    assert rel_err(ours, theirs) < BF16_TOL and rel_err(theirs, oracle(case)) < BF16_TOL


def test_dflash_input_refuses_a_mask():
    from kernel.inputs import make_case
    h = Harness(algorithm="DFLASH", draft=8)
    with pytest.raises(ValueError, match="DFLASH verifies a causal block"):
        h._load(make_case([5], [8], 8, seed=1))
