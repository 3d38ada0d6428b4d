"""Stage v3_wgmma_tma: see README.md beside this file."""

from stages.v3_wgmma_tma.launch import gemm, plan

__all__ = ["gemm", "plan"]
