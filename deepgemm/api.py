"""The library call: `deepgemm.gemm(a, b, ...)` runs the last stage, v5_fused (sm_90a, Hopper)."""

from __future__ import annotations

from typing import Any

from deepgemm import stages
from deepgemm.config import GemmConfig

LIBRARY_STAGE = "v5_fused"  # the stage the library call runs: the last one


def gemm(
    a: Any,
    b: Any,
    *,
    bias: Any = None,
    alpha: float = 1.0,
    activation: str | None = None,
    out_dtype: Any = None,
    out: Any = None,
    config: GemmConfig | None = None,
) -> Any:
    """act(alpha * a @ b + bias) for FP16/BF16 a (M, K) and b (K, N), FP32 accumulation.

    b may be row-major (K, N) (copied once to K-major) or the transposed view of a contiguous (N, K)
    array (read as it is). bias is an optional vector of N; activation is None, 'relu', 'gelu' (erf),
    'gelu_tanh', 'gelu_erf' or 'silu'; out_dtype defaults to the input dtype and may be float32.
    Returns a CuPy array (M, N).
    """
    launcher = stages.load(LIBRARY_STAGE)
    return launcher.gemm(a, b, out, bias=bias, alpha=alpha, activation=activation, out_dtype=out_dtype, config=config)
