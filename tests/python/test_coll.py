"""gpustripe.Comm from Python: collectives on emulated devices (CI) and on GPUs with torch
tensors (GPU machine), and `gpustripe bench coll`."""
import json
import os

import numpy as np
import pytest

import gpustripe


@pytest.fixture(scope="module")
def ctx():
    return gpustripe.Context()


def _upload(ctx, dev, arr):
    p = ctx.alloc_device(dev, max(1, arr.nbytes))
    ctx.upload(p, dev, arr.tobytes())
    return p


def _download(ctx, p, dev, n, dtype):
    return np.frombuffer(ctx.download(p, dev, n * np.dtype(dtype).itemsize), dtype=dtype)


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_allreduce_raw_pointers_match_numpy(ctx, ranks):
    if ctx.device_count < ranks:
        pytest.skip(f"needs {ranks} devices")
    rng = np.random.default_rng(ranks)
    n = 1001  # not divisible by the rank count
    comm = gpustripe.Comm(ctx, list(range(ranks)))
    for op, ref in (("sum", np.sum), ("max", np.max), ("min", np.min)):
        data = [rng.standard_normal(n).astype(np.float64) for _ in range(ranks)]
        send = [_upload(ctx, r, data[r]) for r in range(ranks)]
        recv = [ctx.alloc_device(r, n * 8) for r in range(ranks)]
        comm.allreduce(send, recv, op=op, count=n, dtype="float64")
        want = ref(np.stack(data), axis=0)
        for r in range(ranks):
            np.testing.assert_allclose(_download(ctx, recv[r], r, n, np.float64), want, rtol=1e-12, atol=1e-12)
        assert comm.last_schedule.startswith("allreduce")
        for p in send + recv:
            ctx.free_device(p)


def test_tuning_moves_a_crossover_and_is_checked(ctx):
    n = 1001
    data = [np.full(n, r + 1.0) for r in range(2)]
    send = [_upload(ctx, r, data[r]) for r in range(2)]
    recv = [ctx.alloc_device(r, n * 8) for r in range(2)]
    for tuning, schedule in (({}, "oneshot"), ({"oneshot_max": "0"}, "twoshot")):
        comm = gpustripe.Comm(ctx, [0, 1], tuning=tuning)
        comm.allreduce(send, recv, count=n, dtype="float64")
        assert f" {schedule}:" in comm.last_schedule, comm.last_schedule
        np.testing.assert_array_equal(_download(ctx, recv[1], 1, n, np.float64), np.full(n, 3.0))
    # A pair's copy-engine allreduce from Tuning::ar_ce_min_2, round-major without being asked.
    comm = gpustripe.Comm(ctx, [0, 1], tuning={"ar_ce_min_2": "4K", "rs_tail": "1K"})
    comm.allreduce(send, recv, count=n, dtype="float64")
    assert " ce_twoshot " in comm.last_schedule and "by_round" in comm.last_schedule, comm.last_schedule
    for r in range(2):
        np.testing.assert_array_equal(_download(ctx, recv[r], r, n, np.float64), np.full(n, 3.0))
    for bad in ({"chunks": "8K"}, {"chunk": "lots"}, {"chunk": "0"}, {"ar_ce_min_2": "big"}):
        with pytest.raises(gpustripe.Error):
            gpustripe.Comm(ctx, [0, 1], tuning=bad)
    for p in send + recv:
        ctx.free_device(p)


def test_alltoall_and_inplace_allgather(ctx):
    ranks = 4 if ctx.device_count >= 4 else 2
    comm = gpustripe.Comm(ctx, list(range(ranks)))
    block = 37
    data = [np.arange(ranks * block, dtype=np.int32) + 1000 * r for r in range(ranks)]
    bufs = [_upload(ctx, r, data[r]) for r in range(ranks)]
    comm.alltoall(bufs, bufs, count=block, dtype="int32")  # in place
    for r in range(ranks):
        got = _download(ctx, bufs[r], r, ranks * block, np.int32)
        want = np.concatenate([data[i][r * block:(r + 1) * block] for i in range(ranks)])
        np.testing.assert_array_equal(got, want)
    # Allgather in place: rank r's input is block r of its receive buffer.
    mine = [np.full(block, r + 1, dtype=np.int32) for r in range(ranks)]
    for r in range(ranks):
        ctx.upload(bufs[r] + r * block * 4, r, mine[r].tobytes())
    comm.allgather([bufs[r] + r * block * 4 for r in range(ranks)], bufs, count=block, dtype="int32")
    for r in range(ranks):
        np.testing.assert_array_equal(_download(ctx, bufs[r], r, ranks * block, np.int32), np.concatenate(mine))
    for p in bufs:
        ctx.free_device(p)


class _CudaArray:
    """An array known only through __cuda_array_interface__ (as numba's are)."""

    def __init__(self, ptr, n, typestr="<f4"):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (n,), "typestr": typestr, "version": 3,
                                         "strides": None}


def test_cuda_array_interface_objects(ctx):
    comm = gpustripe.Comm(ctx, [0, 1])
    data = [np.arange(10, dtype=np.float32) * (r + 1) for r in range(2)]
    bufs = [_upload(ctx, r, data[r]) for r in range(2)]
    arrays = [_CudaArray(b, 10) for b in bufs]
    comm.allreduce(arrays, arrays, op="prod")  # count and dtype from the interface
    for r in range(2):
        np.testing.assert_allclose(_download(ctx, bufs[r], r, 10, np.float32), data[0] * data[1])
    with pytest.raises(gpustripe.Error) as e:
        comm.allreduce([_CudaArray(b, 10, "|u1") for b in bufs], arrays)
    assert e.value.status == "GPUSTRIPE_ERR_INVALID_TYPE"
    for p in bufs:
        ctx.free_device(p)


def test_bad_arguments_raise_with_status(ctx):
    comm = gpustripe.Comm(ctx, [0, 1])
    p = [ctx.alloc_device(0, 64), ctx.alloc_device(1, 64)]
    with pytest.raises(gpustripe.Error) as e:
        comm.allreduce(p, p, count=4, dtype="float8")
    assert e.value.status == "GPUSTRIPE_ERR_INVALID_TYPE"
    with pytest.raises(gpustripe.Error) as e:
        comm.allreduce(p[:1], p, count=4, dtype="float32")
    assert e.value.status == "GPUSTRIPE_ERR_INVALID_ARGUMENT"
    with pytest.raises(gpustripe.Error) as e:
        comm.allreduce(p, p, count=4)  # raw pointers need dtype
    assert "dtype" in str(e.value)
    with pytest.raises(gpustripe.Error) as e:
        comm.bcast(p, root=5, count=4, dtype="float32")
    assert e.value.status == "GPUSTRIPE_ERR_INVALID_ARGUMENT"
    with pytest.raises(gpustripe.Error):
        gpustripe.Comm(ctx, [0, 0])
    for q in p:
        ctx.free_device(q)


def test_coll_time_reports_busbw(ctx):
    comm = gpustripe.Comm(ctx, [0, 1])
    t = gpustripe.coll_time(comm, "allreduce", 1 << 16, "float32", "sum", 1, 2, 2)
    assert t["us"] > 0 and t["gbps"] > 0
    assert t["busbw_gbps"] == pytest.approx(t["gbps"] * gpustripe.coll_busbw_factor("allreduce", 2))
    assert gpustripe.coll_busbw_factor("allreduce", 4) == pytest.approx(1.5)
    assert gpustripe.coll_busbw_factor("alltoall", 4) == pytest.approx(0.75)
    with pytest.raises(gpustripe.Error):
        gpustripe.coll_time(comm, "alltoall", 6, "float32", "sum", 1, 1, 1)


def test_bench_coll_writes_results(cli, tmp_path):
    p = cli("bench", "coll", "--sizes", "64K", "--gpus", "2", "--ops", "allreduce,alltoall", "--iters", "1",
            "--trials", "1", "--warmup", "1", "--out", str(tmp_path))
    files = sorted(f for f in os.listdir(tmp_path) if f.endswith(".json"))
    assert len(files) == 1 and "coll-2gpu" in files[0], p.stdout
    from gpustripe import results

    doc = results.load(str(tmp_path / files[0]))
    assert doc["gpus"] == 2
    ops = {(r["op"], r["method"]) for r in doc["rows"]}
    assert ("allreduce", "gpustripe") in ops and ("alltoall", "gpustripe") in ops
    assert all(r["busbw_gbps"] > 0 and r["bytes"] == 65536 for r in doc["rows"])
    assert all(r["dtype"] == "float32" for r in doc["rows"])  # rows of one op compare by their type
    assert (tmp_path / files[0].replace(".json", ".png")).exists()
    if gpustripe.Context().emulated:
        # Methods that cannot run are recorded as absent, with the reason, not faked.
        assert "nccl" in doc["absent"] and "mpi_host_staged" in doc["absent"]
        assert {r["method"] for r in doc["rows"]} == {"gpustripe"}


def test_bench_coll_variants_time_other_settings(cli, tmp_path):
    from gpustripe.benchmarks.coll import parse_variants

    assert parse_variants("a:GPUSTRIPE_X=1,GPUSTRIPE_Y=2; b@bcast+allreduce:GPUSTRIPE_X=3") == [
        ("a", {"GPUSTRIPE_X": "1", "GPUSTRIPE_Y": "2"}, []), ("b", {"GPUSTRIPE_X": "3"}, ["bcast", "allreduce"])]
    assert parse_variants("t:chunk=8K,GPUSTRIPE_X=1") == [("t", {"chunk": "8K", "GPUSTRIPE_X": "1"}, [])]
    for bad in ("a", "a:X=1", ":GPUSTRIPE_X=1", "a:GPUSTRIPE_X", "a@gather:GPUSTRIPE_X=1", "a:Chunk=1"):
        with pytest.raises(SystemExit):
            parse_variants(bad)
    p = cli("bench", "coll", "--sizes", "64K", "--gpus", "2", "--ops", "reduce_scatter", "--iters", "1",
            "--trials", "1", "--warmup", "1", "--methods", "gpustripe", "--no-write",
            "--variants", "forced:GPUSTRIPE_COLL_ALGO=rs_copy,chunk=8K;"
                          "other@alltoall:GPUSTRIPE_COLL_ALGO=all_at_once")
    # The variant's rows carry its schedule: the copy engines' reduce-scatter in 8K chunks, not the default.
    lines = [ln for ln in p.stdout.splitlines() if "gpustripe_forced" in ln and "reduce_scatter 64K" in ln]
    assert lines and all("rs_copy chunks=" in ln for ln in lines), p.stdout
    assert "gpustripe_other" not in p.stdout  # limited to an op this run does not time


def test_nccl_reference_reports_why_it_cannot_run(ctx):
    if not ctx.emulated:
        pytest.skip("on GPUs the reference may run")
    with pytest.raises(gpustripe.Error):
        gpustripe.NcclCollBench(2, 1 << 20, symmetric=True)


def test_torch_tensors_on_gpus(requires_gpu):
    torch = pytest.importorskip("torch")
    if requires_gpu < 2:
        pytest.skip("needs 2 GPUs")
    ctx = gpustripe.Context()
    comm = gpustripe.Comm(ctx, [0, 1])
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 2e-3)):
        xs = [torch.randn(4099, device=f"cuda:{r}").to(dtype) for r in range(2)]
        ys = [torch.empty_like(x) for x in xs]
        comm.allreduce(xs, ys)
        want = (xs[0].double().cpu() + xs[1].double().cpu())
        for y in ys:
            torch.testing.assert_close(y.double().cpu(), want, rtol=tol, atol=tol)
    big = [torch.ones(64 << 20, device=f"cuda:{r}") * (r + 1) for r in range(2)]
    comm.allreduce(big, big)
    assert float(big[0][-1]) == 3.0 and float(big[1][0]) == 3.0
    print(json.dumps({"schedule": comm.last_schedule}))


def test_bench_worker_rows_come_back_and_failures_say_why():
    """The NCCL copy-engine and host-staged MPI references run in worker processes
    (benchmarks/coll.py _run_worker): their rows come back; a failing or slow worker leaves
    the reason in `absent`, not an exception."""
    import sys
    import types

    from gpustripe.benchmarks.coll import _run_worker

    writer = ("import json, sys; cfg = json.load(open(sys.argv[1])); "
              "json.dump({'rows': [{'n': cfg['n'] * 2}]}, open(cfg['out'], 'w'))")
    args = types.SimpleNamespace(timeout=30)
    absent = {}
    got = _run_worker([sys.executable, "-c", writer], {"n": 21}, "w/2", args, absent)
    assert got == {"rows": [{"n": 42}]} and absent == {}

    got = _run_worker([sys.executable, "-c", "import sys; print('no NCCL here', file=sys.stderr); sys.exit(3)"],
                      {}, "w/4", args, absent)
    assert got is None and "exited 3" in absent["w/4"] and "no NCCL here" in absent["w/4"]

    got = _run_worker([sys.executable, "-c", "import time; time.sleep(5)"], {}, "slow/2",
                      types.SimpleNamespace(timeout=1), absent)
    assert got is None and "timed out after 1 s" in absent["slow/2"]
