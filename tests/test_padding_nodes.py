"""DDTree's padding nodes (SGLang pull request #29907): every request verifies D = budget + 1
nodes; rows past its tree's size are all False in the mask, their own diagonal and prefix columns
included. The contract: such a row is valid and attends to the prefix only (SGLang's triton
kernel's behaviour, tests/test_reference_sglang.py); over an empty prefix it sees no key and gives
o = 0, lse = -inf. The oracle, the argument checks and the generators agree here; the CPU
stand-in in tests/sglang/test_sglang_ddtree_fork.py, the CUDA kernel in the GPU validation."""
import math

import pytest
import torch

from kernel.checks import VerifyInputError, tree_violation
from kernel.inputs import ancestor_mask, ddtree_case, dflash_case, make_case
from kernel.reference import verify_attention_reference


def prefix_only(case, b):
    """Float64 attention of request b's queries over its prefix rows alone: (o, lse)."""
    k0, k1 = (int(x) for x in case.kv_indptr[b:b + 2])
    q0, q1 = (int(x) for x in case.qo_indptr[b:b + 2])
    keys = case.kv_cache[case.kv_indices[k0:k1].long(), 0].double()
    logits = torch.einsum("thd,kd->thk", case.q[q0:q1].double(), keys) * case.sm_scale
    return torch.softmax(logits, -1) @ keys[:, :512], torch.logsumexp(logits, -1)


def pr_flat_mask(prefix_lens, parents_per_req, D):
    """The mask as DDTreeWorker._build_flat_tree_mask writes it (#29907, ddtree_worker.py), from
    each request's parents: prefix and tree columns set for the first `actual` rows only."""
    chunks = []
    for S, parents in zip(prefix_lens, parents_per_req):
        actual = len(parents)
        m = torch.zeros(D, S + D, dtype=torch.bool)
        m[:actual, :S] = True
        m[:actual, S:S + actual] = ancestor_mask(parents)
        chunks.append(m.flatten())
    return torch.cat(chunks)


def test_padding_rows_pass_the_checks_and_attend_to_the_prefix_only():
    case = ddtree_case([23, 9], 7, 2, topk=2, tree_sizes=[5, 1], seed=3, dtype=torch.float32)
    o, lse = verify_attention_reference(*case.args())
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()
    for b, n in enumerate([5, 1]):
        q0 = 8 * b
        po, pl = prefix_only(case, b)
        assert torch.allclose(o[q0 + n:q0 + 8], po[n:], atol=1e-12)
        assert torch.allclose(lse[q0 + n:q0 + 8], pl[n:], atol=1e-12)
    # the tree's own rows still see their ancestors: not the prefix-only answer
    assert not torch.allclose(o[1:5], prefix_only(case, 0)[0][1:5], atol=1e-6)


def test_padding_row_over_an_empty_prefix_gives_zero_and_minus_inf():
    case = ddtree_case([0, 4], 3, 2, topk=1, tree_sizes=[2, 4], seed=5, dtype=torch.float32)
    o, lse = verify_attention_reference(*case.args())
    assert not torch.isnan(o).any() and not torch.isnan(lse).any()
    assert (o[2:4] == 0).all() and torch.isneginf(lse[2:4]).all()
    assert torch.isfinite(lse[:2]).all() and torch.isfinite(lse[4:]).all()


def test_a_padding_node_differs_from_a_node_missing_its_diagonal():
    block = ancestor_mask([-1, 0, 1, 1])
    assert tree_violation(block) is None
    padded = block.clone()
    padded[3] = False                   # node 3 a padding node: valid
    assert tree_violation(padded) is None
    broken = block.clone()
    broken[3, 3] = False                # still sees 0 and 1, but not itself: not a tree
    assert tree_violation(broken) == (3, 3, "does not see itself")


def test_a_node_that_sees_a_padding_node_is_refused():
    c = ddtree_case([6], 3, 2, topk=1, tree_sizes=[2], seed=1, dtype=torch.float32)   # nodes 2, 3 padding
    c.custom_mask.view(4, 10)[1, 6 + 2] = 1
    with pytest.raises(VerifyInputError, match=r"custom_mask: request 0: draft node 1 sees a padding node, a row "
                                               r"that sees nothing \(node 2\)"):
        verify_attention_reference(*c.args())


@pytest.mark.parametrize("topk", [1, 2])
@pytest.mark.parametrize("budget", [1, 8, 32])
def test_ddtree_case_is_the_pull_requests_mask(budget, topk):
    prefix = [0, 17, 40]
    case = ddtree_case(prefix, budget, 2, topk=topk, seed=budget + topk, dtype=torch.float32)
    D = budget + 1
    sizes = case.meta["tree_sizes"]
    assert case.meta["draft_lens"] == [D] * 3 and all(1 <= n <= D for n in sizes)
    assert torch.equal(case.custom_mask.bool(), pr_flat_mask(prefix, case.meta["parents"], D))
    assert case.mask_indptr.tolist() == [0] + list(torch.tensor([D * (s + D) for s in prefix]).cumsum(0).tolist())
    if topk == 1:
        assert all(p == [-1] + list(range(len(p) - 1)) for p in case.meta["parents"])


def test_ddtree_sizes_cover_one_to_d_across_seeds():
    seen = {n for s in range(40) for n in ddtree_case([4] * 4, 7, 1, seed=s, dtype=torch.float32).meta["tree_sizes"]}
    assert seen == set(range(1, 9))


def test_dflash_case_is_a_causal_block_without_a_mask():
    c = dflash_case([30, 0, 12], 16, 2, seed=2, dtype=torch.float32)
    assert c.custom_mask is None and c.mask_indptr is None
    assert c.meta["draft_lens"] == [16] * 3 and c.meta["causal"] and c.meta["block"] == 16
    o, _ = verify_attention_reference(*c.args())
    assert torch.isfinite(o).all()


def test_bad_production_shape_arguments_are_named():
    with pytest.raises(VerifyInputError, match=r"tree_sizes: \[0\] is not one node count"):
        make_case([4], [3], 1, tree_sizes=[0])
    with pytest.raises(VerifyInputError, match=r"tree_sizes: \[4\] is not one node count"):
        make_case([4], [3], 1, tree_sizes=[4])
    with pytest.raises(VerifyInputError, match=r"tree_sizes: padding nodes need a mask"):
        make_case([4], [3], 1, tree_sizes=[2], causal=True)
    with pytest.raises(VerifyInputError, match=r"budget: DDTree's node budget must be an int >= 1, got 0"):
        ddtree_case([4], 0)
    with pytest.raises(VerifyInputError, match=r"topk: 1 \(spine, a chain\) or 2 \(full tree\), got 3"):
        ddtree_case([4], 4, topk=3)
    with pytest.raises(VerifyInputError, match=r"block: DFLASH's block size must be an int >= 1, got 0"):
        dflash_case([4], 0)


def test_padding_leaves_the_unpadded_cases_unchanged():
    """tree_sizes=None draws the same cases as before padding existed (the recorded validation
    seeds stay the same cases): the full-size sizes give the same tensors."""
    a = make_case([11, 3], [5, 2], 2, tree="random", seed=9, dtype=torch.float32)
    b = make_case([11, 3], [5, 2], 2, tree="random", seed=9, dtype=torch.float32, tree_sizes=[5, 2])
    assert torch.equal(a.custom_mask, b.custom_mask) and torch.equal(a.q, b.q)
    assert math.isclose(a.sm_scale, b.sm_scale)
