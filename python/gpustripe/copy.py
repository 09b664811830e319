"""``gpustripe.copy_(dst, src)``: a multi-path copy between device arrays of two GPUs.

Works on any array exposing ``__cuda_array_interface__`` (torch CUDA tensors, cupy arrays,
numba device arrays). Ordered on the current stream of the source array's device (torch or
cupy, whichever owns the array), like ``dst.copy_(src)``.
"""
from __future__ import annotations

import math
import threading

from . import _core

_lock = threading.Lock()
_default = None


def default_context() -> "_core.Context":
    """The process's shared Context, made on first use."""
    global _default
    with _lock:
        if _default is None:
            _default = _core.Context()
        return _default


def _error(message: str) -> Exception:
    err = _core.Error(message)
    err.status = "GPUSTRIPE_ERR_INVALID_ARGUMENT"
    return err


def _interface(x, what: str) -> dict:
    try:
        cai = x.__cuda_array_interface__
    except (AttributeError, RuntimeError, TypeError):
        cai = None
    if not isinstance(cai, dict):
        raise _error(f"copy_: {what} ({type(x).__name__}) is not a CUDA device array: "
                     "pass a torch CUDA tensor or a cupy array (anything with __cuda_array_interface__)")
    shape = tuple(cai["shape"])
    if any(int(n) < 0 for n in shape):
        raise _error(f"copy_: {what} has a negative size in its shape {shape}")
    itemsize = int(cai["typestr"][2:])
    strides = cai.get("strides")
    if strides is not None:
        expect, step = [], itemsize
        for n in reversed(shape):
            expect.insert(0, step)
            step *= n
        if tuple(strides) != tuple(expect) and math.prod(shape) > 1:
            raise _error(f"copy_: {what} is not contiguous (strides {tuple(strides)}); make a contiguous copy first")
    return {"ptr": int(cai["data"][0]), "readonly": bool(cai["data"][1]), "shape": shape,
            "typestr": cai["typestr"], "nbytes": math.prod(shape) * itemsize}


def _current_stream(x, device: int) -> int:
    module = type(x).__module__.split(".")[0]
    if module == "torch":
        import torch

        return torch.cuda.current_stream(device).cuda_stream
    if module == "cupy":
        import cupy

        with cupy.cuda.Device(device):
            return cupy.cuda.get_current_stream().ptr
    return 0  # the legacy default stream


def copy_(dst, src, stream: int | None = None, context=None):
    """Copies ``src`` into ``dst`` (same shape and dtype, contiguous, on two GPUs or one),
    striped over the paths the planner picks. Returns ``dst``. ``stream``: a cudaStream_t
    (int) of the source device; default: the current stream of the source's framework."""
    d, s = _interface(dst, "dst"), _interface(src, "src")
    if d["readonly"]:
        raise _error("copy_: dst is read-only")
    if d["shape"] != s["shape"] or d["typestr"] != s["typestr"]:
        raise _error(f"copy_: dst {d['typestr']}{list(d['shape'])} and src {s['typestr']}{list(s['shape'])} "
                     "differ in shape or dtype")
    ctx = context or default_context()
    src_dev, dst_dev = ctx.pointer_device(s["ptr"]), ctx.pointer_device(d["ptr"])
    if src_dev < 0 or dst_dev < 0:
        raise _error("copy_: an array claims CUDA memory that the backend does not know as device memory")
    if stream is None:
        stream = _current_stream(src, src_dev)
    ctx.copy_async(d["ptr"], dst_dev, s["ptr"], src_dev, s["nbytes"], stream)
    return dst
