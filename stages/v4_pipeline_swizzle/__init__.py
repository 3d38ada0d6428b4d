"""Stage v4_pipeline_swizzle: see README.md beside this file."""

from stages.v4_pipeline_swizzle.launch import gemm, plan

__all__ = ["gemm", "plan"]
