"""The first seed's pitfalls (its section 6), made visible on a machine without a GPU.

- A missing wgmma wait or fence: compile a stage with one line taken out and read where ptxas put the
  instructions that order the asynchronous MMAs against the barrier and the next TMA load (`sass_trace`).
- Bank conflicts: which 16-byte bank groups the eight rows of one `ldmatrix` phase touch, for a shared
  tile laid out plainly, padded or XOR-swizzled (`ldmatrix_wavefronts`).
- Accumulation order: the same FP16 products summed in FP32 in three orders, and in FP16, against float64
  (`accumulation_errors`).
- Occupancy against tile size: how many CTAs of a compiled stage fit on one SM (`ctas_per_sm`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from deepgemm.model import ceil_div, round_up
from tutorial.stages import kernel_path

# ---- a line taken out of a stage --------------------------------------------------------------------


def variant_source(stage: str, line: str, replacement: str = "") -> str:
    """The stage's kernel source with the first line that contains `line` replaced (by nothing: removed).
    ValueError when no line contains it, so a demonstration cannot silently compile the original."""
    source = kernel_path(stage).read_text()
    lines = source.splitlines(keepends=True)
    for i, text in enumerate(lines):
        if line in text:
            indent = text[: len(text) - len(text.lstrip())]
            lines[i] = f"{indent}{replacement}\n" if replacement else "\n"
            return "".join(lines)
    raise ValueError(f"no line of {stage}'s kernel contains {line!r}")


ORDERING_INSTRUCTIONS = ("HGMMA", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR", "BAR.SYNC", "SYNCS.ARRIVE", "UTMALDG")


def sass_trace(sass: str, keep: Sequence[str] = ORDERING_INSTRUCTIONS) -> list[str]:
    """The instructions of a SASS listing that contain one of `keep`, in program order, as
    'address  instruction' (operands shortened)."""
    trace = []
    for line in sass.splitlines():
        found = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if found and any(key in found.group(2) for key in keep):
            trace.append(f"{found.group(1)}  {found.group(2)[:60]}")
    return trace


# ---- bank conflicts -------------------------------------------------------------------------------------

BANK_GROUP_BYTES = 16  # 4 banks of 4 bytes: one ldmatrix row, one 16-byte chunk
BANK_GROUPS = 8  # 32 banks x 4 bytes = 128 bytes per wavefront
SWIZZLED_ROW_BYTES = (64, 128)  # v2's rows: BLOCK_K 32 or 64 of 16-bit elements


def tile_offset(row: int, chunk: int, row_bytes: int, swizzle: bool) -> int:
    """Byte offset of 16-byte chunk `chunk` of row `row` in a shared tile of `row_bytes` per row; with the
    XOR swizzle, v2's: chunk c of a 128-byte row r is stored at chunk c ^ (r % 8) (TMA's 128B pattern), of a
    64-byte row at c ^ ((r / 2) % 4) (two rows share a 128-byte pass)."""
    if not swizzle:
        return row * row_bytes + BANK_GROUP_BYTES * chunk
    if row_bytes not in SWIZZLED_ROW_BYTES:
        raise ValueError(f"v2 swizzles rows of {SWIZZLED_ROW_BYTES} bytes, not {row_bytes}")
    chunks = row_bytes // BANK_GROUP_BYTES
    return row * row_bytes + BANK_GROUP_BYTES * (chunk ^ (row // (BANK_GROUPS // chunks) % chunks))


def ldmatrix_wavefronts(row_bytes: int, swizzle: bool, chunk: int = 0) -> int:
    """Shared-memory wavefronts one 8-row phase of ldmatrix needs when its eight lanes read chunk `chunk`
    of rows 0..7: 1 when the eight 16-byte reads fall in eight different bank groups, up to 8 when they
    all fall in one (each further read in a group is replayed)."""
    groups = [(tile_offset(row, chunk, row_bytes, swizzle) // BANK_GROUP_BYTES) % BANK_GROUPS for row in range(8)]
    return max(groups.count(group) for group in set(groups))


# ---- accumulation order ---------------------------------------------------------------------------------


def accumulation_errors(k: int, dots: int = 256, seed: int = 0) -> dict[str, dict[str, float]]:
    """`dots` dot products of length k over FP16 inputs uniform in [-1, 1), summed four ways, each
    compared with float64: FP32 in order k = 0, 1, ...; FP32 in 64-wide blocks whose partial sums are then
    added (a k-tile at a time, as a tiled kernel does); FP32 pairwise (NumPy's own sum); and FP16
    throughout. Per way: the mean and the largest absolute error, relative to the mean |result|."""
    rng = np.random.default_rng(seed)
    a = (rng.random((dots, k), dtype=np.float32) * 2 - 1).astype(np.float16)
    b = (rng.random((dots, k), dtype=np.float32) * 2 - 1).astype(np.float16)
    products = a.astype(np.float32) * b.astype(np.float32)  # exact: an FP16 x FP16 product fits in FP32
    exact = (a.astype(np.float64) * b.astype(np.float64)).sum(axis=1)
    sums = {
        "fp32, k in order": _sequential(products, np.float32),
        "fp32, 64-wide blocks": _sequential(_block_sums(products, 64), np.float32),
        "fp32, pairwise": products.sum(axis=1, dtype=np.float32),
        "fp16, k in order": _sequential(products.astype(np.float16), np.float16),
    }
    scale = float(np.abs(exact).mean())
    return {
        way: {"mean_err": float(np.abs(s - exact).mean()) / scale, "max_err": float(np.abs(s - exact).max()) / scale}
        for way, s in sums.items()
    }


def _sequential(terms: np.ndarray, dtype: type) -> np.ndarray:
    total = np.zeros(terms.shape[0], dtype=dtype)
    for column in terms.T:
        total = (total + column).astype(dtype)
    return total.astype(np.float64)


def _block_sums(terms: np.ndarray, width: int) -> np.ndarray:
    blocks = [
        _sequential(terms[:, i : i + width], np.float32).astype(np.float32) for i in range(0, terms.shape[1], width)
    ]
    return np.stack(blocks, axis=1)


# ---- occupancy --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SmLimits:
    """What one Hopper SM (H100, H200) holds: compute capability 9.0."""

    registers: int = 65536
    smem_bytes: int = 233472  # 228 KB
    smem_reserved_per_block: int = 1024  # the runtime keeps 1 KB per resident block
    threads: int = 2048
    blocks: int = 32
    register_granule: int = 256  # registers are allocated per warp in units of 256


def ctas_per_sm(
    threads: int, registers_per_thread: int, smem_bytes: int, limits: SmLimits = SmLimits()
) -> dict[str, int]:
    """How many CTAs of a kernel fit on one SM, by each limit ('by_registers', 'by_smem', 'by_threads',
    'by_blocks') and overall ('ctas', the smallest)."""
    warps = ceil_div(threads, 32)
    per_warp = round_up(registers_per_thread * 32, limits.register_granule)
    by = {
        "by_registers": limits.registers // (warps * per_warp),
        "by_smem": limits.smem_bytes // (smem_bytes + limits.smem_reserved_per_block),
        "by_threads": limits.threads // threads,
        "by_blocks": limits.blocks,
    }
    return {**by, "ctas": min(by.values())}
