"""Stage v2_mma_sync: see README.md beside this file."""

from stages.v2_mma_sync.launch import gemm, plan

__all__ = ["gemm", "plan"]
