"""The lab's sweep of the library kernel's space (no GPU): which configurations it times."""

from __future__ import annotations

from deepgemm.heuristic import tiling_of
from deepgemm.plan import DEFAULTS, check_config
from lab import library_space


def _clusters(m: int, n: int, k: int, swapped: bool | None = None) -> set[tuple[int, int]]:
    tilings = [tiling_of(c) for c in library_space.candidates(m, n, k, 132)]
    return {(t.cluster_m, t.cluster_n) for t in tilings if swapped is None or t.swap_ab == swapped}


def test_the_sweep_multicasts_both_operands_where_the_tiles_pair_both_ways():
    """At mid M on a long K (512 x 2112 x 7168) the operands' L2 traffic bounds 128-wide tiles: the sweep tries
    2 x 2 clusters, in both orientations, beside none, along M and along the tokens."""
    assert {(1, 1), (2, 1), (2, 2)} <= _clusters(512, 2112, 7168)
    swapped = _clusters(512, 2112, 7168, swapped=True)
    assert (2, 2) in swapped and any(cn == 4 for _, cn in swapped)
    assert (2, 2) not in _clusters(1, 4096, 4096)  # one token tile: nothing to pair along N'


def test_every_configuration_of_the_sweep_is_one_the_kernel_takes():
    for m, n, k in ((512, 2112, 7168), (777, 4096, 4096), (1, 28672, 4096), (4096, 4096, 4096)):
        configs = library_space.candidates(m, n, k, 132)
        assert configs and len({str(c) for c in configs}) == len(configs)
        for config in configs:
            check_config(config.merged_over(DEFAULTS))
