"""DeepGEMM, staged: the library. `gemm` runs a Hopper FP16/BF16 GEMM kernel specialised per shape, with a
fused epilogue, on CuPy arrays or PyTorch tensors; `GemmConfig` overrides the configuration it picks.

For PyTorch models, `deepgemm.linear` (F.linear's semantics) and `deepgemm.nn.Linear` (nn.Linear's) import
torch when first asked for; `import deepgemm` alone does not. Where torch is imported already, its operators
(`torch.ops.deepgemm.gemm`, `gemm_out`: autograd, torch.compile, CUDA graphs) are registered now.
"""

import sys
from typing import Any

from deepgemm.api import gemm
from deepgemm.config import GemmConfig

__all__ = ["GemmConfig", "gemm"]  # and, with torch, `linear` and `nn`

if "torch" in sys.modules:
    from deepgemm import torch_ops  # noqa: F401


def __getattr__(name: str) -> Any:
    """`deepgemm.linear` and `deepgemm.nn`, imported (with torch) when first asked for."""
    if name in ("linear", "nn"):
        import deepgemm.nn

        return deepgemm.nn.linear if name == "linear" else deepgemm.nn
    raise AttributeError(f"module 'deepgemm' has no attribute {name!r}")
