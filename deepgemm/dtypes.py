"""The element types the kernels take, by name, and their `-D` define."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

FLOAT16 = np.dtype(np.float16)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT32 = np.dtype(np.float32)

INPUT_DTYPES = {"fp16": FLOAT16, "bf16": BFLOAT16}
OUTPUT_DTYPES = {"fp16": FLOAT16, "bf16": BFLOAT16, "fp32": FLOAT32}


def dtype_name(dtype: np.dtype) -> str:
    """'fp16', 'bf16' or 'fp32' for a supported dtype; TypeError otherwise."""
    for name, candidate in OUTPUT_DTYPES.items():
        if np.dtype(dtype) == candidate:
            return name
    raise TypeError(f"dtype {np.dtype(dtype)} is not supported: use float16, bfloat16 (or float32 for outputs)")


def input_dtype(name_or_dtype: str | np.dtype) -> np.dtype:
    """The input dtype for 'fp16' / 'bf16' or a dtype; TypeError for anything else."""
    if isinstance(name_or_dtype, str) and name_or_dtype in INPUT_DTYPES:
        return INPUT_DTYPES[name_or_dtype]
    dtype = np.dtype(name_or_dtype)
    if dtype not in INPUT_DTYPES.values():
        raise TypeError(f"input dtype {dtype} is not supported: the kernels take float16 or bfloat16")
    return dtype


def dtype_defines(dtype: np.dtype) -> dict[str, int]:
    """The define that selects the kernel's element type."""
    return {"DTYPE_BF16": int(np.dtype(dtype) == BFLOAT16)}


def output_dtype(dtype: Any) -> np.dtype:
    """An output dtype given as a NumPy dtype, its name ('float32', 'fp32' ...), or a torch dtype (torch.float32
    ...); TypeError for anything else."""
    named = TORCH_DTYPES.get(str(dtype)) or (OUTPUT_DTYPES.get(dtype) if isinstance(dtype, str) else None)
    try:
        found = np.dtype(named or dtype)
    except TypeError:
        found = None
    if found not in OUTPUT_DTYPES.values():
        raise TypeError(f"out_dtype {dtype} is not supported: use float16, bfloat16 or float32")
    return found


TORCH_DTYPES = {"torch.float16": FLOAT16, "torch.bfloat16": BFLOAT16, "torch.float32": FLOAT32}
