"""The caller's framework, PyTorch or CuPy: what the library call reads off its arrays and asks of it.

The hot path reads metadata straight off the arrays (no DLPack, ~0.2 µs an attribute), allocates the
output with the framework's own allocator and launches on the framework's current stream, so that its
stream-ordered allocator cannot hand memory the kernel still reads to other work. torch is never
imported here: `Torch` is built only once a caller has passed a torch tensor.
"""

from __future__ import annotations

import sys
from typing import Any

import cupy
import numpy as np

from deepgemm.dtypes import TORCH_DTYPES, dtype_name


class Cupy:
    """CuPy arrays: a CuPy array out, on CuPy's current stream."""

    name = "cupy"

    @staticmethod
    def meta(x: Any) -> tuple:
        """What of `x` fixes a plan: shape, strides, dtype, device. TypeError for anything but a CuPy array."""
        if type(x) is not cupy.ndarray:
            raise TypeError("not a CuPy array")
        return (x.shape, x.strides, x.dtype, x.device.id)

    @staticmethod
    def pointer(x: cupy.ndarray) -> int:
        return x.data.ptr

    @staticmethod
    def span(x: cupy.ndarray) -> tuple[int, int]:
        """The bytes [first, end) x can touch."""
        return byte_span(x.data.ptr, x.shape, x.strides, x.itemsize)

    @staticmethod
    def stream(device: int) -> int:
        return cupy.cuda.get_current_stream().ptr

    @staticmethod
    def empty(shape: tuple[int, int], dtype: Any, like: cupy.ndarray) -> cupy.ndarray:
        return cupy.empty(shape, dtype=dtype)  # the plan has made like's device current

    @staticmethod
    def zeros(shape: tuple[int, int], dtype: Any, like: cupy.ndarray) -> cupy.ndarray:
        return cupy.zeros(shape, dtype=dtype)

    @staticmethod
    def framework_dtype(dtype: np.dtype) -> np.dtype:
        return dtype

    @staticmethod
    def float32_vector(x: cupy.ndarray) -> cupy.ndarray:
        return cupy.ascontiguousarray(x, dtype=cupy.float32)

    @staticmethod
    def copy(dst: cupy.ndarray, src: cupy.ndarray) -> None:
        """src's values into dst (same shape, any strides), on the current stream."""
        cupy.copyto(dst, src)

    @staticmethod
    def capturing(device: int) -> bool:
        """Whether CuPy's current stream is capturing a CUDA graph."""
        return stream_capturing(cupy.cuda.get_current_stream().ptr)


class Torch:
    """PyTorch tensors: a torch tensor out, allocated by torch, on torch's current stream."""

    name = "torch"

    def __init__(self) -> None:
        self.torch = sys.modules["torch"]
        # The raw handle without building a torch.cuda.Stream (~2 µs); Triton reads it the same way.
        self._raw_stream = getattr(self.torch._C, "_cuda_getCurrentRawStream", None)
        self._dtypes = {"fp16": self.torch.float16, "bf16": self.torch.bfloat16, "fp32": self.torch.float32}

    def meta(self, x: Any) -> tuple:
        """What of `x` fixes a plan: shape, strides, dtype, device. TypeError for anything but a tensor."""
        if not isinstance(x, self.torch.Tensor):
            raise TypeError("not a torch tensor")
        return (x.shape, x.stride(), x.dtype, x.get_device())

    @staticmethod
    def pointer(x: Any) -> int:
        return x.data_ptr()

    @staticmethod
    def span(x: Any) -> tuple[int, int]:
        """The bytes [first, end) x can touch."""
        size = x.element_size()
        return byte_span(x.data_ptr(), x.shape, tuple(stride * size for stride in x.stride()), size)

    def stream(self, device: int) -> int:
        if self._raw_stream is not None:
            return self._raw_stream(device)
        return self.torch.cuda.current_stream(device).cuda_stream

    @staticmethod
    def empty(shape: tuple[int, int], dtype: Any, like: Any) -> Any:
        return like.new_empty(shape, dtype=dtype)  # on like's device; 1 µs less than torch.empty

    @staticmethod
    def zeros(shape: tuple[int, int], dtype: Any, like: Any) -> Any:
        return like.new_zeros(shape, dtype=dtype)

    def framework_dtype(self, dtype: np.dtype) -> Any:
        return self._dtypes[dtype_name(dtype)]

    @staticmethod
    def float32_vector(x: Any) -> Any:
        return x.float().contiguous()

    @staticmethod
    def copy(dst: Any, src: Any) -> None:
        """src's values into dst (same shape, any strides), on torch's current stream."""
        dst.copy_(src)

    def capturing(self, device: int) -> bool:
        """Whether torch's current stream of `device` is capturing a CUDA graph."""
        return stream_capturing(self.stream(device))


_TORCH: list[Torch] = []


def framework_of(x: Any) -> Cupy | Torch:
    """Torch for a torch tensor on a CUDA device, CuPy for anything else (whose checks name what is wrong)."""
    if type(x) is cupy.ndarray:
        return Cupy
    if _TORCH and isinstance(x, _TORCH[0].torch.Tensor):
        return _TORCH[0] if x.is_cuda else Cupy
    if is_cuda_tensor(x):
        _TORCH.append(Torch())
        return _TORCH[0]
    return Cupy


def torch_view(x: Any) -> cupy.ndarray | None:
    """A CuPy view of a torch CUDA tensor built from its metadata (a few µs, where DLPack takes ~30 with
    its stream handshake), or None for what DLPack should convert: empty tensors and dtypes not taken here.
    The view holds the tensor, so its memory lives as long as the view."""
    if not is_cuda_tensor(x) or x.numel() == 0:
        return None
    dtype = TORCH_DTYPES.get(str(x.dtype))
    if dtype is None:
        return None
    strides = tuple(stride * dtype.itemsize for stride in x.stride())
    span = dtype.itemsize * (1 + sum((size - 1) * stride for size, stride in zip(x.shape, x.stride(), strict=True)))
    memory = cupy.cuda.UnownedMemory(x.data_ptr(), span, x, x.get_device())
    return cupy.ndarray(tuple(x.shape), dtype, cupy.cuda.MemoryPointer(memory, 0), strides)


def stream_capturing(stream: int) -> bool:
    """Whether `stream` is capturing a CUDA graph (or its capture was invalidated: nothing may be queued on it).
    The legacy default stream cannot be asked while another stream captures: CUDA's error there counts as yes."""
    try:
        return bool(cupy.cuda.runtime.streamIsCapturing(stream))
    except cupy.cuda.runtime.CUDARuntimeError:
        return True


def is_cuda_tensor(x: Any) -> bool:
    """A PyTorch tensor on a CUDA device, recognised without importing torch."""
    return type(x).__module__.startswith("torch") and getattr(getattr(x, "device", None), "type", None) == "cuda"


def byte_span(ptr: int, shape: tuple[int, ...], byte_strides: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """The bytes [first, end) an array of `shape` and `byte_strides` at `ptr` can touch (strides of any sign)."""
    reach = [(size - 1) * stride for size, stride in zip(shape, byte_strides, strict=True)]
    return ptr + sum(r for r in reach if r < 0), ptr + sum(r for r in reach if r > 0) + itemsize


def spans_overlap(first: tuple[int, int], second: tuple[int, int]) -> bool:
    """Whether two byte ranges [first, end) share a byte."""
    return first[0] < second[1] and second[0] < first[1]
