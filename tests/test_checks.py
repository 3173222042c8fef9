"""Every malformed input raises VerifyInputError naming the argument and the offending value."""
import pytest
import torch

from kernel.checks import VerifyInputError
from kernel.inputs import make_case
from kernel.reference import verify_attention_reference


@pytest.fixture
def case():
    return make_case([12, 5], [4, 3], 2, tree="random", seed=0, dtype=torch.float32)


def call(case, **over):
    args = dict(q=case.q, kv_cache=case.kv_cache, kv_indptr=case.kv_indptr, kv_indices=case.kv_indices,
                k_extend=case.k_extend, custom_mask=case.custom_mask, mask_indptr=case.mask_indptr,
                qo_indptr=case.qo_indptr, sm_scale=case.sm_scale)
    args.update(over)
    return verify_attention_reference(**args)


def raises(case, pattern, **over):
    with pytest.raises(VerifyInputError, match=pattern):
        call(case, **over)


def test_valid_case_passes(case):
    o, lse = call(case)
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()


def test_wrong_dtype(case):
    raises(case, r"q: dtype int32", q=case.q.to(torch.int32))
    raises(case, r"kv_indices: dtype float32", kv_indices=case.kv_indices.float())
    raises(case, r"custom_mask: dtype float32", custom_mask=case.custom_mask.float())


def test_wrong_rank(case):
    raises(case, r"q: expected rank 3 .* got shape \(7, 1152\)", q=case.q.reshape(7, -1))
    raises(case, r"kv_cache: expected rank 3", kv_cache=case.kv_cache[:, 0])
    raises(case, r"kv_indptr: expected rank 1", kv_indptr=case.kv_indptr[None])


def test_head_dims(case):
    raises(case, r"q: head dim 512 != 576", q=case.q[..., :512])
    raises(case, r"kv_cache: shape \(\d+, 1, 512\)", kv_cache=case.kv_cache[..., :512].contiguous())
    raises(case, r"k_extend: shape \(7, 1, 128\)", k_extend=case.k_extend[..., :128])


def test_kv_indptr_not_monotone(case):
    raises(case, r"kv_indptr: not monotone: kv_indptr\[2\] = 3 < kv_indptr\[1\] = 12",
           kv_indptr=torch.tensor([0, 12, 3], dtype=torch.int32))


def test_kv_indptr_beyond_indices(case):
    raises(case, r"kv_indptr: last value 40 exceeds len\(kv_indices\) = 17",
           kv_indptr=torch.tensor([0, 12, 40], dtype=torch.int32))


def test_kv_indptr_not_from_zero(case):
    raises(case, r"kv_indptr: must start at 0, starts at 1", kv_indptr=torch.tensor([1, 12, 17], dtype=torch.int32))


def test_slot_out_of_range(case):
    bad = case.kv_indices.clone()
    bad[3] = case.kv_cache.shape[0] + 5
    raises(case, rf"kv_indices: slot {case.kv_cache.shape[0] + 5} at position 3 is outside the pool", kv_indices=bad)
    bad[3] = -2
    raises(case, r"kv_indices: slot -2 at position 3", kv_indices=bad)


def _block(case, b):
    S = int(case.kv_indptr[b + 1] - case.kv_indptr[b])
    T = int(case.qo_indptr[b + 1] - case.qo_indptr[b])
    m0 = int(case.mask_indptr[b])
    return case.custom_mask[m0: m0 + T * (S + T)].view(T, S + T)[:, S:]


def test_node_not_seeing_itself(case):
    _block(case, 1)[2, 2] = 0
    raises(case, r"custom_mask: request 1: draft node 2 does not see itself")


def test_node_seeing_a_non_ancestor():
    c = make_case([6], [4], 2, tree="star", seed=1, dtype=torch.float32)   # 0 <- 1, 0 <- 2, 0 <- 3
    c.custom_mask.view(4, 10)[3, 6 + 1] = 1      # node 3 also sees nodes 1 and 2, two siblings:
    c.custom_mask.view(4, 10)[3, 6 + 2] = 1      # no path from a root passes through both
    with pytest.raises(VerifyInputError, match=r"custom_mask: request 0: draft node 3 sees a node that is not its ancestor \(node 2\)"):
        verify_attention_reference(*c.args())


def test_node_missing_an_ancestor():
    c = make_case([6], [3], 2, tree="chain", seed=1, dtype=torch.float32)  # 0 <- 1 <- 2
    c.custom_mask.view(3, 9)[2, 6 + 0] = 0        # node 2 sees its parent 1 but not the root
    with pytest.raises(VerifyInputError, match=r"draft node 2 does not see an ancestor of its parent \(node 0\)"):
        verify_attention_reference(*c.args())


def test_t_mismatch_between_qo_indptr_and_mask(case):
    # a mask built for T = 4 drafts on a 11-token prefix, where kv_indptr says 12
    raises(case, r"mask_indptr: request 0: 60 mask entries, but qo_indptr gives T = 4 draft tokens and kv_indptr "
           r"S = 12, so T \* \(S \+ T\) = 64", mask_indptr=torch.tensor([0, 60, 60 + 24], dtype=torch.int64))


def test_qo_indptr_not_matching_q(case):
    raises(case, r"qo_indptr: last value 6 != num_tokens 7", qo_indptr=torch.tensor([0, 4, 6], dtype=torch.int32))


def test_length_mismatch_between_indptrs(case):
    raises(case, r"kv_indptr: length 2 != qo_indptr length 3", kv_indptr=case.kv_indptr[:2])


def test_sm_scale(case):
    raises(case, r"sm_scale: -1.0 is not a positive number", sm_scale=-1.0)


def test_mask_without_indptr(case):
    raises(case, r"mask_indptr: is None but custom_mask is given", mask_indptr=None)
