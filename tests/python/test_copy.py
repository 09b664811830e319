"""gpustripe.Context and gpustripe.copy_ (emulated devices in CI; torch on a GPU machine)."""
import os

import pytest

import gpustripe
from gpustripe.copy import copy_, default_context


def _ctx():
    return default_context()


def test_context_describes_the_node():
    ctx = _ctx()
    assert ctx.device_count >= 2
    assert ctx.backend_name in ("cuda", "emulated")
    if ctx.emulated:
        assert ctx.device_label == "emulated-h200x4"


@pytest.mark.parametrize("n", [1, 4097, 3 << 20, (64 << 20) + 5])
def test_raw_copy_is_byte_exact(n):
    ctx = _ctx()
    data = os.urandom(n)
    src, dst = ctx.alloc_device(0, n), ctx.alloc_device(1, n)
    try:
        ctx.upload(src, 0, data)
        ctx.upload(dst, 1, b"\xee" * n)
        ctx.copy(dst, 1, src, 0, n)
        assert ctx.download(dst, 1, n) == data
    finally:
        ctx.free_device(src)
        ctx.free_device(dst)


def test_large_copies_are_split():
    ctx = _ctx()
    assert "host" in ctx.plan(0, 1, 1 << 30) or "gpu" in ctx.plan(0, 1, 1 << 30)
    before = ctx.stats()
    n = 256 << 20
    src, dst = ctx.alloc_device(0, n), ctx.alloc_device(1, n)
    try:
        ctx.copy(dst, 1, src, 0, n)
    finally:
        ctx.free_device(src)
        ctx.free_device(dst)
    after = ctx.stats()
    assert after["schedules"] + after["graph_launches"] > before["schedules"] + before["graph_launches"]


def test_bad_raw_copies_raise_with_status():
    ctx = _ctx()
    src = ctx.alloc_device(0, 64)
    try:
        with pytest.raises(gpustripe.Error) as e:
            ctx.copy(0, 1, src, 0, 64)
        assert e.value.status == "GPUSTRIPE_ERR_INVALID_POINTER"
        with pytest.raises(gpustripe.Error) as e:
            ctx.copy(src, 7, src, 0, 64)
        assert e.value.status == "GPUSTRIPE_ERR_INVALID_DEVICE"
        ctx.copy(0, 1, 0, 0, 0)  # nothing to do
    finally:
        ctx.free_device(src)


@pytest.mark.parametrize("bytes_", [2**64 - 1, 2**64 - 4096, 2**63])
def test_wrapping_sizes_raise_invalid_size_and_write_nothing(bytes_):
    """A byte count that wraps past 2**64 from an offset into the buffers (a negative size
    made unsigned): refused before anything is enqueued, the destination as it was."""
    ctx = _ctx()
    n, at = 1 << 20, 4096
    src, dst = ctx.alloc_device(0, n), ctx.alloc_device(1, n)
    try:
        ctx.upload(src, 0, os.urandom(n))
        ctx.upload(dst, 1, b"\xee" * n)
        with pytest.raises(gpustripe.Error) as e:
            ctx.copy(dst + at, 1, src + at, 0, bytes_)
        assert e.value.status == "GPUSTRIPE_ERR_INVALID_SIZE"
        assert ctx.download(dst, 1, n) == b"\xee" * n
    finally:
        ctx.free_device(src)
        ctx.free_device(dst)


class FakeArray:
    """Anything with __cuda_array_interface__ (what cupy and torch expose)."""

    def __init__(self, ptr, shape, typestr="<f4", strides=None, readonly=False):
        self.__cuda_array_interface__ = {"data": (ptr, readonly), "shape": shape, "typestr": typestr,
                                         "strides": strides, "version": 3}


def test_copy_on_array_interfaces(four_devices):
    ctx = _ctx()
    n = 1 << 20
    data = os.urandom(4 * n)
    src, dst = ctx.alloc_device(2, 4 * n), ctx.alloc_device(3, 4 * n)
    try:
        ctx.upload(src, 2, data)
        out = FakeArray(dst, (n,))
        assert gpustripe.copy_(out, FakeArray(src, (n,))) is out
        # copy_ is asynchronous on the source GPU's default stream; a blocking copy on that
        # stream (the same first 4 bytes again) returns when it has drained.
        ctx.copy(dst, 3, src, 2, 4)
        assert ctx.download(dst, 3, 4 * n) == data
    finally:
        ctx.free_device(src)
        ctx.free_device(dst)


def test_copy_rejects_mismatches_clearly():
    ctx = _ctx()
    src, dst = ctx.alloc_device(0, 4096), ctx.alloc_device(1, 4096)
    try:
        with pytest.raises(gpustripe.Error, match="differ in shape or dtype"):
            copy_(FakeArray(dst, (1024,)), FakeArray(src, (512,)))
        with pytest.raises(gpustripe.Error, match="differ in shape or dtype"):
            copy_(FakeArray(dst, (1024,), "<f4"), FakeArray(src, (1024,), "<i4"))
        with pytest.raises(gpustripe.Error, match="not contiguous"):
            copy_(FakeArray(dst, (32, 16)), FakeArray(src, (32, 16), strides=(4, 128)))
        with pytest.raises(gpustripe.Error, match="read-only"):
            copy_(FakeArray(dst, (16,), readonly=True), FakeArray(src, (16,)))
        with pytest.raises(gpustripe.Error, match="not a CUDA device array"):
            copy_(bytearray(16), FakeArray(src, (4,)))
        with pytest.raises(gpustripe.Error, match="negative size"):
            copy_(FakeArray(dst, (-4,)), FakeArray(src, (-4,)))
    finally:
        ctx.free_device(src)
        ctx.free_device(dst)


def test_copy_torch_tensors(requires_gpu):
    torch = pytest.importorskip("torch")
    if requires_gpu < 2:
        pytest.skip("needs 2 GPUs")
    for n in (1, 1000003, 64 << 20):
        a = torch.randint(1, 255, (n,), dtype=torch.uint8, device="cuda:0")
        b = torch.zeros(n, dtype=torch.uint8, device="cuda:1")
        with torch.cuda.device(0):
            gpustripe.copy_(b, a)
            torch.cuda.current_stream(0).synchronize()
        assert torch.equal(a.cpu(), b.cpu())
    with pytest.raises(gpustripe.Error):
        gpustripe.copy_(torch.zeros(4, device="cuda:1"), torch.zeros(5, device="cuda:0"))


def test_negative_sizes_are_gpustripe_errors():
    """A negative byte count names the call and the size (not nanobind's argument-type error)."""
    ctx = _ctx()
    src, dst = ctx.alloc_device(0, 4096), ctx.alloc_device(1, 4096)
    try:
        for call in (lambda: ctx.copy_async(dst, 1, src, 0, -1), lambda: ctx.copy(dst, 1, src, 0, -4096),
                     lambda: ctx.download(src, 0, -1), lambda: ctx.alloc_device(0, -1)):
            with pytest.raises(gpustripe.Error, match="cannot be negative") as e:
                call()
            assert e.value.status == "GPUSTRIPE_ERR_INVALID_SIZE"
    finally:
        ctx.free_device(src)
        ctx.free_device(dst)
