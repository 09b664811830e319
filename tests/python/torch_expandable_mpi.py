"""A PyTorch tensor sent through the interposer, rank 0 -> rank 1 (mpi4py, device pointers;
run under mpirun with libgpustripe_mpi.so preloaded and PYTORCH_CUDA_ALLOC_CONF set, e.g.
expandable_segments:True). Rank 0 first asks the driver what memory the tensor lies in: the
allocations (pieces) covering it, their handle types and buffer ids, whether they export a
POSIX file descriptor. Then each size goes over once for the data check (random bytes, sha256
on both sides) and `--iters` times for the time; the IPC counters of both ranks show the path
(a multi-piece mapping, a one-allocation mapping, or none: streamed) and must match what the
driver said. Prints one "TORCHIPC {json}" line per size and
"torch_expandable_mpi: all checks passed" (exit 0), else exits 1."""
import argparse
import ctypes
import hashlib
import json
import os
import re
import sys
import time

T0 = time.perf_counter()


def say(what: str) -> None:
    """A progress line with the time since start (stderr, flushed: a timeout shows where it was)."""
    print(f"[{os.environ.get('OMPI_COMM_WORLD_RANK', '?')} +{time.perf_counter() - T0:.1f}s] {what}", file=sys.stderr,
          flush=True)


say("importing torch")
import torch  # noqa: E402

say("importing mpi4py (MPI_Init)")
from mpi4py import MPI  # noqa: E402

say("ready")

MAX_PIECES = 64  # Backend::kMaxIpcPieces
POSIX_FD = 1     # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
ATTR_BUFFER_ID, ATTR_RANGE_START, ATTR_RANGE_SIZE, ATTR_ALLOWED_HANDLE_TYPES = 7, 11, 12, 14


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"size {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def address_buffer(ptr: int, n: int):
    mem = getattr(MPI, "buffer", None) or MPI.memory  # mpi4py 4 / 3
    return mem.fromaddress(ptr, n)


class Driver:
    """The few driver calls the report needs (libcuda through ctypes; the context is torch's)."""

    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")

    def attr(self, ptr: int, which: int) -> int | str:
        v = ctypes.c_uint64(0)
        r = self.cu.cuPointerGetAttribute(ctypes.byref(v), ctypes.c_int(which), ctypes.c_uint64(ptr))
        return v.value if r == 0 else f"error {r}"

    def pieces(self, ptr: int, n: int) -> list[dict]:
        out, at = [], ptr
        while at < ptr + n and len(out) < 4 * MAX_PIECES:
            base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
            r = self.cu.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(at))
            if r != 0:
                out.append({"error": f"cuMemGetAddressRange {r}", "at": at - ptr})
                break
            out.append({"offset": base.value - ptr, "size": size.value, "buffer_id": self.attr(at, ATTR_BUFFER_ID),
                        "allowed_handle_types": self.attr(at, ATTR_ALLOWED_HANDLE_TYPES)})
            at = base.value + size.value
        return out

    def allocation(self, ptr: int) -> dict:
        """requestedHandleTypes of the allocation at ptr and whether it exports a descriptor."""
        h = ctypes.c_uint64(0)
        r = self.cu.cuMemRetainAllocationHandle(ctypes.byref(h), ctypes.c_void_p(ptr))
        if r != 0:
            return {"retain": f"error {r} (not cuMemCreate memory)"}
        prop = (ctypes.c_ubyte * 64)()
        out = {}
        r = self.cu.cuMemGetAllocationPropertiesFromHandle(prop, h)
        out["requested_handle_types"] = int.from_bytes(bytes(prop[4:8]), "little") if r == 0 else f"error {r}"
        fd = ctypes.c_int(-1)
        r = self.cu.cuMemExportToShareableHandle(ctypes.byref(fd), h, ctypes.c_int(POSIX_FD), ctypes.c_ulonglong(0))
        out["posix_fd_export"] = "ok" if r == 0 else f"error {r}"
        if r == 0:
            os.close(fd.value)
        self.cu.cuMemRelease(h)
        return out


def torch_facts() -> dict:
    lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10_cuda.so")
    words = []
    try:
        with open(lib, "rb") as f:
            words = sorted({w.decode() for w in re.findall(rb"expandable_segments[A-Za-z_]*", f.read())})
    except OSError:
        pass
    return {"torch": torch.__version__, "cuda": torch.version.cuda,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "c10_cuda_words": words}


def segment_of(ptr: int) -> dict:
    for s in torch.cuda.memory_snapshot():
        if s["address"] <= ptr < s["address"] + s["total_size"]:
            return {k: s.get(k) for k in ("address", "total_size", "segment_type", "is_expandable") if k in s}
    return {}


def counters() -> dict:
    lib = ctypes.CDLL(None)
    try:
        fn = lib.gpustripe_mpi_test_ipc_counter
    except AttributeError:
        return {}
    fn.restype = ctypes.c_longlong
    names = ("map_misses", "map_hits", "map_stale", "fd_opens", "multi_opens", "pieces_mapped", "fd_offered")
    return {k: fn(k.encode()) for k in names}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="256M", help="comma list of tensor sizes")
    p.add_argument("--iters", type=int, default=5)
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if comm.Get_size() != 2:
        print("run with 2 ranks", file=sys.stderr)
        return 2
    ndev = torch.cuda.device_count()
    dev = torch.device("cuda", rank % ndev)
    torch.cuda.set_device(dev)
    drv = Driver()
    ok = True
    for k, n in enumerate(parse_size(s) for s in a.sizes.split(",")):
        say(f"{n} bytes: allocating")
        torch.cuda.empty_cache()
        g = torch.Generator(device=dev).manual_seed(1234 + k)
        t = torch.randint(0, 256, (n,), dtype=torch.uint8, device=dev, generator=g) if rank == 0 else \
            torch.zeros(n, dtype=torch.uint8, device=dev)
        torch.cuda.synchronize()
        ptr = t.data_ptr()
        facts = {}
        if rank == 0:
            pieces = drv.pieces(ptr, n)
            facts = {"pieces": len(pieces), "piece_sizes": sorted({x.get("size", 0) for x in pieces}),
                     "first": pieces[:2], "allocation": drv.allocation(ptr), "segment": segment_of(ptr),
                     "range": [drv.attr(ptr, ATTR_RANGE_START), drv.attr(ptr, ATTR_RANGE_SIZE)]}
            fd_ok = all(isinstance(x.get("allowed_handle_types"), int) and x["allowed_handle_types"] & POSIX_FD
                        for x in pieces) and all("error" not in x for x in pieces)
            facts["expect"] = ("stream" if not fd_ok or len(pieces) > MAX_PIECES else
                               "mapped-multi" if len(pieces) > 1 else "mapped-one")
        say(f"{n} bytes: tensor at 0x{ptr:x}, facts {json.dumps(facts)[:400]}")
        before = counters()
        buf = address_buffer(ptr, n)
        comm.Barrier()
        say(f"{n} bytes: first message")
        if rank == 0:
            comm.Send([buf, MPI.BYTE], dest=1, tag=k)
            digest = hashlib.sha256(t.cpu().numpy().tobytes()).hexdigest()
            comm.send(digest, dest=1, tag=100 + k)
        else:
            comm.Recv([buf, MPI.BYTE], source=0, tag=k)
            torch.cuda.synchronize()
            digest = comm.recv(source=0, tag=100 + k)
            same = hashlib.sha256(t.cpu().numpy().tobytes()).hexdigest() == digest
        comm.Barrier()
        say(f"{n} bytes: checked, timing {a.iters} messages")
        t0 = time.perf_counter()
        for i in range(a.iters):
            if rank == 0:
                comm.Send([buf, MPI.BYTE], dest=1, tag=1000 + i)
            else:
                comm.Recv([buf, MPI.BYTE], source=0, tag=1000 + i)
        secs = time.perf_counter() - t0
        after = counters()
        delta = {key: after[key] - before.get(key, 0) for key in after}
        got = comm.gather({"rank": rank, "delta": delta, "secs": secs, "same": same if rank == 1 else None}, root=0)
        if rank == 0:
            recv = got[1]
            d = recv["delta"]
            path = ("mapped-multi" if d.get("multi_opens", 0) > 0 else
                    "mapped-one" if d.get("map_misses", 0) + d.get("map_stale", 0) > 0 else
                    "stream" if d else "unknown (no interposer counters)")
            report = {"bytes": n, "iters": a.iters, "gbps": n * a.iters / recv["secs"] / 1e9 if a.iters else 0,
                      "data_ok": recv["same"], "path": path, "receiver": d, "sender": got[0]["delta"], **facts,
                      **torch_facts()}
            good = recv["same"] and path == facts["expect"]
            report["ok"] = good
            ok = ok and good
            print("TORCHIPC " + json.dumps(report), flush=True)
        del t, buf
    ok = comm.bcast(ok, root=0)
    if rank == 0 and ok:
        print("torch_expandable_mpi: all checks passed", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
