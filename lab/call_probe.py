"""Where a small call's time goes: the host path piece by piece, and the GPU time with the host hidden.

`python -m lab.call_probe` (GPU and PyTorch needed) prints two tables and writes JSON to $OUT or /tmp:
- host: microseconds per call of each piece of `deepgemm.gemm`'s cached path (torch inputs), as the harness
  times a call's host cost (`timing.host_us_per_call`);
- device: GPU µs per call of library kernel configs (`deepgemm.gemm` with a config: split-K, 2 x 2
  clusters, BLOCK_N 128, none of which v5 has) and torch.matmul, with the host's time hidden
  (`timing.device_us_per_call`).
"""

from __future__ import annotations

import json
import os
from functools import partial

import cupy
import torch

import deepgemm
from deepgemm import api
from deepgemm.config import GemmConfig
from deepgemm.frameworks import framework_of
from tutorial.timing import device_us_per_call, host_us_per_call

SETS = 4  # input sets rotated: 4 x 32 MB of B at N = K = 4096 is more than the 50 MB L2
PIECE_CALLS = 2000  # the pieces that launch nothing are cheap: more calls per repeat


def host_pieces(m: int, n: int, k: int) -> dict[str, float]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    deepgemm.gemm(a, b)
    fw = framework_of(a)
    key = api.plan_key(fw, a, b, None, None, None, None, None)
    plan = api._PLANS[key]  # a deepgemm.plan.Plan: its launch and the writers of each call's parameters
    raw, setters = plan.launch, dict(plan.setters)
    first = a if plan.kernel_a.source == "a" else b  # what the kernel's A map (parameter 0) reads: b where swapped
    other = torch.empty_like(first)
    pointers = [first.data_ptr(), other.data_ptr()]
    flip = [0]

    def repoint() -> None:
        flip[0] ^= 1
        raw.repoint_map(0, pointers[flip[0]])

    stream = fw.stream(0)
    pieces = {
        "framework_of": lambda: framework_of(a),
        "plan_key": lambda: api.plan_key(fw, a, b, None, None, None, None, None),
        "dict get": lambda: api._PLANS.get(key),
        "getDevice": torch.cuda.current_device,
        "cupy getDevice": cupy.cuda.runtime.getDevice,
        "new_empty": lambda: a.new_empty((m, n)),
        "torch.empty": lambda: torch.empty((m, n), device="cuda", dtype=torch.bfloat16),
        "data_ptr": a.data_ptr,
        "stream": lambda: fw.stream(0),
        "repoint (changed)": repoint,
        "setter f32": lambda: setters["alpha"](1.0),
    }
    found = {name: host_us_per_call([fn], calls=PIECE_CALLS) for name, fn in pieces.items()}
    found["cuLaunchKernel"] = host_us_per_call([lambda: raw.launch(stream)])
    found["deepgemm.gemm"] = host_us_per_call([lambda: deepgemm.gemm(a, b)])
    found["torch.matmul"] = host_us_per_call([lambda: torch.matmul(a, b)])
    return found


CONFIGS = {
    "default": None,
    "n128 c1": GemmConfig(block_n=128, extra={"CLUSTER_M": 1}),
    "n128 c1 s2": GemmConfig(block_n=128, extra={"CLUSTER_M": 1, "SPLIT_K": 2}),
    "n128 c1 s4": GemmConfig(block_n=128, extra={"CLUSTER_M": 1, "SPLIT_K": 4}),
    "n128 c1 s8": GemmConfig(block_n=128, extra={"CLUSTER_M": 1, "SPLIT_K": 8}),
    "n256 c1 s4": GemmConfig(extra={"CLUSTER_M": 1, "SPLIT_K": 4}),
    "n128 cn2": GemmConfig(block_n=128, extra={"CLUSTER_M": 1, "CLUSTER_N": 2}),
    "n128 cn2 s4": GemmConfig(block_n=128, extra={"CLUSTER_M": 1, "CLUSTER_N": 2, "SPLIT_K": 4}),
}
SHAPES = [(1, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096), (256, 4096, 4096), (512, 4096, 4096),
          (2048, 2048, 2048), (128, 2112, 7168), (4096, 2112, 7168), (3000, 5000, 700)]  # fmt: skip


def device_table() -> list[dict]:
    rows = []
    for m, n, k in SHAPES:
        sets = [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                 torch.randn(k, n, device="cuda", dtype=torch.bfloat16)) for _ in range(SETS)]  # fmt: skip
        row = {"m": m, "n": n, "k": k, "torch": device_us_per_call([partial(torch.matmul, *ab) for ab in sets])}
        expected = torch.matmul(sets[0][0].double(), sets[0][1].double())
        for name, cfg in CONFIGS.items():
            try:
                got = deepgemm.gemm(*sets[0], config=cfg).double()
                err = float((got - expected).abs().max() / expected.abs().max())
                us = device_us_per_call([partial(deepgemm.gemm, *ab, config=cfg) for ab in sets])
                row[name] = us if err < 1e-2 else f"wrong {err:.3g}"
            except (ValueError, RuntimeError) as error:
                row[name] = f"error: {str(error)[:60]}"
        rows.append(row)
        print(" ".join(f"{v:7.1f}" if isinstance(v, float) else str(v) for v in row.values()), flush=True)
    return rows


def main() -> None:
    host = host_pieces(128, 4096, 4096)
    for name, us in host.items():
        print(f"{name:<20} {us:7.2f} us")
    print("m n k torch", *CONFIGS)
    rows = device_table()
    out = os.environ.get("OUT", "/tmp")
    with open(os.path.join(out, "call_probe.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "host_us": host, "device_us": rows}, f, indent=1)


if __name__ == "__main__":
    main()
