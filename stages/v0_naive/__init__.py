"""Stage v0_naive: see README.md beside this file."""

from stages.v0_naive.launch import gemm, plan

__all__ = ["gemm", "plan"]
