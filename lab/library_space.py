"""python -m lab.library_space: the library kernel's configuration space at chosen shapes, beside torch.matmul.

A research sweep, wider than autotune's: per shape, the plain and the swapped orientation, 64-, 128- and
256-row tiles, the tile widths that leave the last tile nearly full, clusters along either side, and
the tiles whole, cut by stream-K (one or two rounds) or by split-K. Every candidate is verified on
NaN-poisoned output, then timed on the GPU alone (`timing.device_us_per_call`, as autotune times), beside
torch.matmul on the same operands timed the same way. What it finds is what the heuristic's model is
fitted to and what autotune's candidates are drawn from; it is recorded (`--record`) as
lab/results/<gpu>/library_space.json.

    python -m lab.library_space --shapes 128x4096x4096,777x4096x4096 --dtype fp16 --record
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from deepgemm import heuristic
from deepgemm.config import GemmConfig
from deepgemm.driver import device_limits
from deepgemm.heuristic import MAX_BLOCK_N, WIDE_BLOCK_M, WIDE_MAX_BLOCK_N, max_stages
from deepgemm.model import ceil_div, round_up
from deepgemm.plan import DEFAULTS, check_config
from lab import shape_sweep
from tutorial.autotune import TUNED_LAYOUT, time_config
from tutorial.bench import Workload
from tutorial.call_suite import require_torch
from tutorial.timing import device_us_per_call

DEFAULT_SHAPES = (
    "1x4096x4096,16x4096x4096,64x4096x4096,128x4096x4096,256x4096x4096,512x4096x4096,777x4096x4096,"
    "1024x4096x4096,2048x4096x4096,4096x4096x4096,1x28672x4096,128x28672x4096,512x28672x4096,4096x2112x7168"
)
TIGHT_TILES = 3  # tile counts tried along a dimension: the fewest that cover it, and one or two more
SWAP_UP_TO_M = 1024  # the tokens as wgmma's N: weighed up to this M (cuBLAS does so at 777)
MODEL_CHEAPEST = 24  # the cost model's cheapest candidates, swept beside the sweep's own families


def tight_widths(size: int, step: int, widest: int = 256, fewest: int = 16) -> list[int]:
    """Tile widths (multiples of `step`, `fewest` to `widest`) that cover `size` with its last tile nearly
    full: for each tile count t from the fewest possible on, round_up(ceil(size / t), step), TIGHT_TILES
    counts in all; and the widest itself."""
    first = ceil_div(size, widest)
    found = {round_up(ceil_div(size, t), step) for t in range(first, first + TIGHT_TILES)}
    return sorted({w for w in found if fewest <= w <= widest} | {min(widest, round_up(size, step))}, reverse=True)


def _cuts(tiles: int, slots: int, k_tiles: int) -> Iterator[dict[str, int]]:
    """Whole tiles; stream-K (one round, and two where there are more) where the last round is partial;
    split-K into as many slices as the idle SMs take, where the tiles leave half of them idle."""
    yield {}
    if tiles % slots:
        yield {"STREAM_K": 1}
        if tiles > slots:
            yield {"STREAM_K": 2}
    split = min(slots // tiles, k_tiles // 4, 16)
    if tiles * 2 <= slots and split > 1:
        yield {"SPLIT_K": split}


def _clusters(swap: int, tiles_m: int, tiles_n: int) -> list[tuple[int, int]]:
    """Clusters worth a try: none; two CTAs along M sharing B where there are tile rows to pair; swapped,
    up to four along the tokens sharing the weight's tile, where there are that many token tiles; and 2 x 2,
    both operands multicast, where the tiles pair both ways (each operand crosses L2 half as often: at mid M
    on a long K that traffic, not the tensor cores, bounds 128-wide tiles)."""
    found = [(1, 1)]
    if tiles_m >= 4:
        found.append((2, 1))
    if swap and tiles_n > 1:
        found.append((1, min(4, 1 << (tiles_n - 1).bit_length())))
    if tiles_m >= 2 and tiles_n >= 2:
        found.append((2, 2))
    return list(dict.fromkeys(found))


def candidates(m: int, n: int, k: int, sm_count: int) -> list[GemmConfig]:
    """The sweep's configurations at one shape (module docstring), every one the kernel can take, and the
    cost model's MODEL_CHEAPEST cheapest (what the heuristic and autotune would weigh first)."""
    found = [choice.config() for choice in heuristic.candidates(m, n, k, sm_count)[:MODEL_CHEAPEST]]
    k_tiles = ceil_div(k, 64)
    for swap in (0, 1) if m <= SWAP_UP_TO_M else (0,):
        rows, cols = (n, m) if swap else (m, n)  # the kernel's M and N
        step = 8 if swap else 16
        block_ms = ((128, 64) if swap or m <= 256 else (128,)) + ((WIDE_BLOCK_M,) if rows > 128 else ())
        for block_m in block_ms:
            widest = WIDE_MAX_BLOCK_N if block_m == WIDE_BLOCK_M else MAX_BLOCK_N
            for block_n in tight_widths(cols, step, widest=widest, fewest=step):
                found += _configs(swap, block_m, block_n, rows, cols, sm_count, k_tiles)
    return list({heuristic.config_name(config): config for config in found}.values())  # the model's first


def _configs(swap: int, block_m: int, block_n: int, rows: int, cols: int, sm_count: int,
             k_tiles: int) -> list[GemmConfig]:
    """One tile's configurations the kernel can take: each cluster worth a try, each cut of its tiles."""
    if not swap and block_m == 128 and rows <= 64:
        return []  # half the tile's rows past M
    found = []
    tiles_m, tiles_n = ceil_div(rows, block_m), ceil_div(cols, block_n)
    for cluster_m, cluster_n in _clusters(swap, tiles_m, tiles_n):
        tiles = ceil_div(tiles_m, cluster_m) * ceil_div(tiles_n, cluster_n)
        for cut in _cuts(tiles, sm_count // (cluster_m * cluster_n), k_tiles):
            extra = {"SWAP_AB": swap, "CLUSTER_M": cluster_m, "CLUSTER_N": cluster_n, **cut}
            stages = max_stages(block_n, block_m, swap_ab=bool(swap))
            config = GemmConfig(block_m=block_m, block_n=block_n, num_stages=stages, extra=extra)
            try:
                check_config(config.merged_over(DEFAULTS))
            except ValueError:
                continue
            found.append(config)
    return found


def sweep_shape(m: int, n: int, k: int, dtype_name: str, sm_count: int) -> dict[str, Any]:
    """Every candidate verified and timed at one shape, and torch.matmul on the same operands; the fastest
    again with programmatic dependent launch (`pdl_us`: back-to-back calls overlap prologue and tail)."""
    torch = require_torch()
    work = Workload.make(m, n, k, dtype_name).in_layout(*TUNED_LAYOUT)
    views = [(torch.from_dlpack(a), torch.from_dlpack(b)) for a, b in work.problems]
    torch_us = device_us_per_call([lambda a=a, b=b: torch.matmul(a, b) for a, b in views])
    configs = candidates(m, n, k, sm_count)
    timed = [time_config(config, work)[0] for config in configs]
    for entry in timed:
        if entry["passed"]:
            entry["x_torch"] = torch_us / entry["us"]
    ranked = sorted((i for i, e in enumerate(timed) if e["passed"]), key=lambda i: timed[i]["us"])
    row = {"dtype": dtype_name, "m": m, "n": n, "k": k, "torch_us": torch_us, "candidates": timed}
    if not ranked:
        print(f"{dtype_name} {m}x{n}x{k}: no candidate passed", flush=True)
        return row
    best = timed[ranked[0]]
    pdl = time_config(replace(configs[ranked[0]], extra={**configs[ranked[0]].extra, "PDL": 1}), work)[0]
    row["pdl_us"] = pdl.get("us")
    print(f"{dtype_name} {m}x{n}x{k}: torch {torch_us:8.1f} us; {len(ranked)}/{len(timed)} passed; best "
          f"{best['name']} {best['us']:8.1f} us x {best['x_torch']:.3f}; with PDL {row['pdl_us'] or 0:8.1f} us",
          flush=True)  # fmt: skip
    for i in ranked[1:4]:
        print(f"    {timed[i]['name']:<28} {timed[i]['us']:8.1f} us x {timed[i]['x_torch']:.3f}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    def sm_count(device: int) -> int:
        return device_limits(device).sm_count

    return shape_sweep.run(argv, "lab.library_space", __doc__, DEFAULT_SHAPES,
                           lambda shape, device: candidates(*shape, sm_count(device)),
                           lambda shape, dtype, device: sweep_shape(*shape, dtype, sm_count(device)))  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
