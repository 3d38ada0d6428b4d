"""DeepGEMM, staged: a Hopper FP16/BF16 GEMM rebuilt in six stages; `gemm` runs the last one."""

from deepgemm.api import gemm
from deepgemm.config import GemmConfig

__all__ = ["GemmConfig", "gemm"]
