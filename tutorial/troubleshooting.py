"""The second seed's quick-reference table (its section 5.5), made true for this code: for each symptom, what
this project prints or which record shows it, computed here rather than quoted, so the page cannot drift
from the code. Notebook 08 prints the table; nothing here needs a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deepgemm.operands import check_compute_capability
from deepgemm.tma import tile_map_spec
from tutorial import results, stages
from tutorial.stages import compile_report


@dataclass(frozen=True)
class Symptom:
    """One row: the seed's symptom, what this project shows for it, the cause and the fix."""

    symptom: str
    shown: str
    cause: str
    fix: str


def compile_error(arch: str) -> str:
    """The first error line of compiling v5 for `arch` (through NVRTC, no GPU needed)."""
    try:
        compile_report("v5_fused", stages.default_defines("v5_fused"), arch)
    except RuntimeError as err:
        found = next(line for line in str(err).splitlines() if "error" in line)
        return " ".join(found.replace("\0", "").split())  # the log's NUL separators and padding out
    raise AssertionError(f"v5 compiled for {arch}: the example no longer shows the error")


def wrong_gpu_error() -> str:
    """What v5 says on a GPU that is not Hopper (here an A100's name and compute capability)."""
    try:
        check_compute_capability((8, 0), "NVIDIA A100-SXM4-80GB", (9, 0), "v5_fused", exact=True)
    except RuntimeError as err:
        return str(err)
    raise AssertionError("an A100 passed the check for sm_90a")


def misaligned_error() -> str:
    """What the tensor-map check says of a row TMA cannot address (K = 700 FP16 elements, 1400 bytes)."""
    try:
        tile_map_spec((3000, 700), (1400, 2), 0x10000, 2, 128, 64, 128)
    except ValueError as err:
        return str(err)
    raise AssertionError("TMA accepted a 1400-byte row stride")


def row(record: dict[str, Any], **where: Any) -> dict[str, Any]:
    """The one row of a record with these field values; LookupError if there is none."""
    for found in record["rows"]:
        if all(found.get(key) == value for key, value in where.items()):
            return found
    raise LookupError(f"no row with {where} in the record")


def symptoms() -> list[Symptom]:
    """The six rows, from the compiler, the checks and the H200 records."""
    tuned = row(results.load("autotune"), dtype="fp16", m=128, n=4096, k=4096)
    default = next(c for c in tuned["candidates"] if c["name"] == "n256 c2 s1 st4")
    copied = row(results.load("shapes"), dtype="fp16", m=3000, n=5000, k=700)
    cold = row({"rows": results.load("call")["first_call"]}, mode="cold")
    warm = row({"rows": results.load("call")["first_call"]}, mode="warm")
    return [
        Symptom(
            "PTX version / unsupported instruction",
            f"compiled for sm_90: `{compile_error('sm_90')}`; for sm_80: `{compile_error('sm_80')}`",
            "wgmma and setmaxnreg exist only in the architecture-specific target sm_90a, not in sm_90 or older",
            "compile with `-gencode=arch=compute_90a,code=sm_90a` (the harness passes `-arch=sm_90a` to NVRTC); "
            "on another GPU v3 to v5 refuse to run: `" + wrong_gpu_error() + "`",
        ),
        Symptom(
            "misaligned address",
            f"the tensor-map check, before any launch: `{misaligned_error()}`",
            "TMA needs a 16-byte aligned base and row strides that are multiples of 16 bytes",
            "nothing to do for correctness: the call copies such an operand into padded rows (the library's plan "
            "stages it, `deepgemm/plan.py`; a stage copies it in `tutorial.launch.tma_operand`); "
            "for speed, store K padded to a multiple of 8 elements and pass the [:, :K] view",
        ),
        Symptom(
            "half of cuBLAS's speed",
            f"at 128 x 4096 x 4096 FP16, the library's (and v5's) default tile takes {default['us']:.1f} µs on the "
            f"GPU, the tuned {tuned['name']} {tuned['us']:.1f} (`autotune.json`)",
            "one tile shape for every problem: 16 cluster tiles leave 100 of 132 SMs idle at small M",
            "let the call choose (no `config`): the autotune table, else the heuristic; "
            "`python -m tutorial autotune --shapes MxNxK --record` for a shape of yours",
        ),
        Symptom(
            "large deviations",
            "every check prints `max abs ..., rel fro ..., p99.9 abs ...: FAIL (n non-finite, m over bound)` "
            "against a per-element bound (`tutorial/check.py`)",
            "FP16 accumulation (notebook 08, section 3), or elements the kernel never wrote or read from "
            "uninitialised padding (the outputs are poisoned with NaN, so they show as non-finite)",
            "accumulate in FP32 (every stage does); zero any padding a tensor map reads",
        ),
        Symptom(
            "slow first call",
            f"first call in a fresh process: {cold['first_call_s']:.3f} s with NVRTC compiling, "
            f"{warm['first_call_s']:.3f} s with CuPy's disk cache filled (`call.json`)",
            "the JIT: NVRTC compiles the kernel for the call's defines on first use",
            "nothing: the compiled kernel stays in CuPy's disk cache (CUPY_CACHE_DIR, ~/.cupy/kernel_cache by default) "
            "for later processes",
        ),
        Symptom(
            "second call still slow",
            f"3000 x 5000 x 700 FP16: {copied['call_us']:.0f} µs per call, {copied['device_us']:.0f} µs of "
            f"it on the GPU; issuing one costs the host about {copied['host_us']:.0f} µs (timed apart, "
            "`shapes.json`)",
            "rows of K = 700 elements (1400 bytes) cannot be read by TMA in place, so each call first copies them "
            "into padded rows; a new plan is also made for every new shape, stride, alignment, dtype or option",
            "pad K to a multiple of 8 elements in your own storage; keep shapes and layouts fixed across calls",
        ),
    ]
