"""kernel/bench/sanitize_tiers.py on the CPU: its edge cases reach the loaders' edges, and bad
arguments are named before any GPU is looked for."""
import pytest

from kernel.bench import sanitize_tiers
from kernel.ops import TIERS


def test_edge_batches_cover_tile_and_pair_edges_and_a_split():
    prefixes = {S for batch, _ in sanitize_tiers.EDGE_BATCHES for S in batch}
    # empty, one row, a tile's last and first rows, a pair's, and past it
    assert {0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65} <= prefixes
    # a prefix long enough that the KV splits (more than one 128-token chunk a request)
    assert max(prefixes) >= 1000
    for batch, drafts in sanitize_tiers.EDGE_BATCHES:
        assert len(batch) == len(drafts) and all(1 <= t <= 8 for t in drafts)


@pytest.mark.parametrize("argv, name", [(["--out", "x", "--pools", "int4"], "--pools"),
                                         (["--out", "x", "--tiers", "3"], "--tiers"),
                                         (["--out", "x", "--tiers", "nine"], "--tiers")])
def test_bad_arguments_name_the_argument_and_value(argv, name, capsys):
    with pytest.raises(SystemExit) as e:
        sanitize_tiers.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert name in err and argv[-1] in err
    assert 3 not in TIERS
