"""Stage v1_tiled: see README.md beside this file."""

from stages.v1_tiled.launch import gemm, plan

__all__ = ["gemm", "plan"]
