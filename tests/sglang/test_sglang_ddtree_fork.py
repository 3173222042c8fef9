"""DDTree (SGLang pull request #29907) on an SGLang 0.5.23 fork, through SGLang's real backend.

The verify input as the pull request builds it (spec_inputs.DDTreeVerifyShape: a flat bool mask
of D x (prefix + D) per request, D = budget + 1 for every request, padding rows all False, topk 1
or 2), with the server's draft tokens kept at the block size (16) while D = 17 or 33 tokens are
verified (the pull request's own test: 16 against 33). Issue 24's problems:
- 2: padding rows are served (prefix-only attention; o = 0 over an empty prefix), not NaN;
- 4: a batch verifying more tokens than the server's draft tokens per request runs the kernel,
  eager and in the graph form, where the LSE scratch sized from 16 made every one fall back
  (reason `lse_scratch`);
- 3: a backend without the verify call site refuses `flash` at start, naming what is missing,
  and publishes no arm; one without `target_verify_num_tokens_per_req` (the base's __init__)
  installs (the plugin crashed there with an AttributeError)."""
import pytest
import torch

from kernel.inputs import ddtree_case
from kernel.sglang import adapter, metrics
from kernel.sglang.harness import Harness, oracle, rel_err, switch
from kernel.sglang.strict import StrictFlashError

BF16_TOL = 1e-2
BLOCK = 16         # DFLASH's block: the server's speculative_num_draft_tokens in the pull request


def _harness(budget):
    return Harness(algorithm="DDTREE", draft=BLOCK, verify_width=budget + 1, max_bs=4)


def _check(h, case, o):
    assert torch.isfinite(o).all()
    ref = oracle(case)
    assert rel_err(o, ref) < BF16_TOL
    # row by row: each padding row is its prefix-only answer; over an empty prefix exactly 0
    D, off = h.width, 0
    for S, n in zip(case.meta["prefix_lens"], case.meta["tree_sizes"]):
        pad = slice(off + n, off + D)
        if S == 0:
            assert (o[pad] == 0).all() and (ref[pad] == 0).all()
        elif n < D:
            assert rel_err(o[pad], ref[pad]) < BF16_TOL
        off += D


@pytest.mark.parametrize("topk", [1, 2])
@pytest.mark.parametrize("budget", [16, 32])
def test_padded_trees_eager_and_graph(flash, budget, topk):
    D = budget + 1
    h = _harness(budget)
    assert h.backend.target_verify_num_tokens_per_req == BLOCK < D
    first = ddtree_case([40, 0, 13], budget, 8, topk=topk, tree_sizes=[1, D // 2, D], seed=budget + topk)
    adapter.calls.clear()
    o = h.run_eager(first)
    _check(h, first, o)
    call = flash.calls[-1]
    assert call["max_draft_len"] == D and call["custom_mask"].dtype == torch.bool
    assert call["lse_out"] is None and call["with_lse"] is False
    # the graph form at the request pool's size: 4 x D x 8 rows, twice what an LSE scratch sized
    # from the server's 16 tokens per request held
    o = h.capture(first, graph_bs=4)
    _check(h, first, o)
    second = ddtree_case([7, 61, 0, 30], budget, 8, topk=topk, tree_sizes=[D, 1, 3, D - 1], seed=99 + budget)
    o2 = h.replay(second)
    _check(h, second, o2)
    assert dict(adapter.calls) == {"flash": 3}, dict(adapter.calls)   # no fallback, eager nor graph


def test_flash_arm_agrees_with_sglangs_arm_on_padded_trees(flash, bf16_interpreter):
    h = _harness(16)
    control = h.build_backend("triton")
    case = ddtree_case([33, 0], 16, 8, topk=2, tree_sizes=[5, 9], seed=8)
    ours, theirs = h.run_eager(case), h.run_eager(case, backend=control)
    assert torch.isfinite(theirs).all()
    assert rel_err(theirs, oracle(case)) < BF16_TOL and rel_err(ours, theirs) < BF16_TOL


def _fork_base():
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    class ForkBase(TritonAttnBackend):
        def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
            # as the pull request's base: a split-KV branch for AMD only, else extend_attention_fwd
            if self.use_verify_splitkv and forward_batch.forward_mode.is_target_verify():
                raise NotImplementedError
            raise NotImplementedError
    return ForkBase


def test_a_backend_without_the_call_site_refuses_flash_and_publishes_nothing(flash, monkeypatch):
    published = []
    monkeypatch.setattr(metrics, "publish_backend", lambda arm, *a, **k: published.append(arm))
    h = Harness(draft=8)
    published.clear()
    with switch("flash"), pytest.raises(StrictFlashError) as e:
        _fork_base()(h.runner)
    msg = str(e.value)
    assert "ForkBase.forward_extend never reads use_verify_shared_kv" in msg
    assert "never reads verify_shared_kv_fwd" in msg and msg.startswith("mla-verify: MLA_VERIFY_BACKEND=flash, but")
    assert published == []
    with switch("triton"):                    # the control arm is SGLang's own either way
        backend = _fork_base()(h.runner)
    assert published == ["triton"] and not hasattr(backend, "mla_verify_backend")


def test_a_backend_without_target_verify_num_tokens_per_req_installs(flash):
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    def missing(self):
        raise AttributeError("'ForkInit' object has no attribute 'target_verify_num_tokens_per_req'")

    class ForkInit(TritonAttnBackend):
        """The pull request's base __init__ sets no target_verify_num_tokens_per_req."""
        target_verify_num_tokens_per_req = property(missing, lambda self, value: None)

    h = Harness(draft=8)
    with switch("flash"):
        backend = ForkInit(h.runner)
    assert not hasattr(backend, "target_verify_num_tokens_per_req")
    assert backend.mla_verify_backend == "flash" and backend.use_verify_shared_kv
