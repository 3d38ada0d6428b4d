"""DeepGEMM, staged: the library. `gemm` runs a Hopper FP16/BF16 GEMM kernel specialised per shape, with a
fused epilogue, on CuPy arrays or PyTorch tensors; `GemmConfig` overrides the configuration it picks."""

from deepgemm.api import gemm
from deepgemm.config import GemmConfig

__all__ = ["GemmConfig", "gemm"]
