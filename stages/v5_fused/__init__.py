"""Stage v5_fused: see README.md beside this file."""

from stages.v5_fused.launch import gemm, plan

__all__ = ["gemm", "plan"]
