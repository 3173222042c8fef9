"""The generators: valid trees, NaN wherever no prefix token lives, layouts as named, seeded."""
import pytest
import torch

from kernel.checks import VerifyInputError, tree_violation
from kernel.inputs import TREES, ancestor_mask, make_case, random_case, tree_parents


@pytest.mark.parametrize("kind", TREES)
@pytest.mark.parametrize("T", [1, 2, 7, 64, 1024])
def test_trees_are_trees(kind, T):
    parents = tree_parents(kind, T, torch.Generator().manual_seed(T))
    assert len(parents) == T and parents[0] == -1
    assert all(0 <= p < i for i, p in enumerate(parents) if i)
    assert tree_violation(ancestor_mask(parents)) is None


def test_tree_kinds_differ_in_shape():
    g = torch.Generator().manual_seed(0)
    depth = {k: int(ancestor_mask(tree_parents(k, 64, g)).sum(1).max()) for k in TREES}
    assert depth["chain"] == 64 and depth["star"] == 2
    assert 2 < depth["ddtree"] < 64


def test_unused_slots_are_nan_and_used_are_finite():
    c = make_case([50, 20], [3, 2], 2, layout="scattered", page_size=16, seed=4, dtype=torch.float32)
    used = torch.zeros(c.kv_cache.shape[0], dtype=torch.bool)
    used[c.kv_indices] = True
    assert torch.isfinite(c.kv_cache[used]).all()
    assert torch.isnan(c.kv_cache[~used]).all()
    assert not used[:16].any(), "page 0 is SGLang's padding page"


@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_pages_are_runs_of_consecutive_slots(page_size):
    c = make_case([200], [2], 1, layout="scattered", page_size=page_size, seed=5, dtype=torch.float32)
    idx = c.kv_indices
    assert (idx[::page_size] % page_size == 0).all()
    for start in range(0, 200, page_size):
        run = idx[start: start + page_size]
        assert torch.equal(run - run[0], torch.arange(len(run)))


def test_contiguous_is_one_run():
    c = make_case([300], [2], 1, layout="contiguous", seed=6, dtype=torch.float32)
    assert torch.equal(c.kv_indices - c.kv_indices[0], torch.arange(300))


def test_fragmented_is_not_one_run():
    c = make_case([300], [2], 1, layout="fragmented", page_size=4, seed=7, dtype=torch.float32)
    jumps = int((c.kv_indices[1:] - c.kv_indices[:-1] != 1).sum())
    assert jumps > 3


def test_seeded_and_reproducible():
    a, b = random_case(42, dtype=torch.float32), random_case(42, dtype=torch.float32)
    for f in ("q", "kv_indices", "k_extend", "kv_indptr", "qo_indptr"):
        assert torch.equal(getattr(a, f), getattr(b, f))
    c = random_case(43, dtype=torch.float32)
    assert not (a.q.shape == c.q.shape and torch.equal(a.q, c.q))


def test_full_mask_layout_has_all_true_prefix():
    c = make_case([9, 4], [3, 2], 1, seed=8, dtype=torch.float32)
    blk = c.custom_mask[: 3 * 12].view(3, 12)
    assert blk[:, :9].all()
    assert int(c.mask_indptr[-1]) == 3 * 12 + 2 * 6


def test_bad_generator_arguments():
    with pytest.raises(VerifyInputError, match="tree: unknown kind 'bush'"):
        tree_parents("bush", 4, torch.Generator())
    with pytest.raises(VerifyInputError, match="layout: unknown 'tiled'"):
        make_case([4], [2], 1, layout="tiled")
    with pytest.raises(VerifyInputError, match="page_size: must be >= 1, got 0"):
        make_case([4], [2], 1, page_size=0)
