"""gpustripe bench mpi_rma: every synchronization mode's puts and gets, the accumulate rows,
send/recv and the one-pair bound rows alongside in one results file (emulated devices in CI: host windows, the MPI's).
Needs the MPI clients built (an MPI was found)."""
import glob
import json
import os
import shutil

import pytest

BUILD = os.environ.get("GPUSTRIPE_BUILD_DIR", "build/dev")


@pytest.fixture
def mpi_build():
    if not shutil.which("mpirun") or not os.path.exists(os.path.join(BUILD, "bench/mpi/mpi_rma_bench")):
        pytest.skip("no mpirun or MPI clients not built")
    return BUILD


def test_quick_mpi_rma_one_file_every_sync(cli, tmp_path, mpi_build):
    p = cli("bench", "mpi_rma", "--build", mpi_build, "--sizes", "1M:2M", "--latency-sizes", "8:16", "--iters", "2",
            "--window", "2", "--out", str(tmp_path), "--timeout", "120")
    files = glob.glob(str(tmp_path / "*-mpi-rma-2gpu-*.json"))
    assert len(files) == 1 and glob.glob(files[0][:-5] + ".png"), p.stdout
    doc = json.load(open(files[0]))
    assert doc["schema"] == 1 and not doc["absent"], doc["absent"]
    rows = doc["rows"]
    for op in ("put", "get"):
        got = {(r["method"], r["bytes"]) for r in rows if r["op"] == op}
        for m in ("mpi_gpustripe_lock", "mpi_gpustripe_fence", "mpi_gpustripe_pscw", "mpi_gpustripe_sendrecv"):
            assert {(m, 1 << 20), (m, 2 << 20)} <= got, (op, m)
    for op in ("put_latency", "get_latency"):
        assert {r["bytes"] for r in rows if r["op"] == op} == {8, 16}
    acc = [r for r in rows if r["op"] == "accumulate"]
    assert len(acc) == 1 and acc[0]["mops"] > 0
    assert [r for r in rows if r["op"] == "fetch_and_op"]
    for r in rows:
        assert r["us"] > 0 and r["gbps"] >= 0
    # The bound at the bandwidth sizes in the same file: measured in this process and predicted, both ways.
    for op in ("put", "get"):
        for m in ("bound_engine", "bound_peer_copy", "model_engine", "model_direct"):
            assert {r["bytes"] for r in rows if r["op"] == op and r["method"] == m} == {1 << 20, 2 << 20}, (op, m)
    assert "bound: one pair one way" in p.stdout
    lat = [r for r in rows if r["op"] == "put_latency" and r["method"] == "mpi_gpustripe_lock"]
    assert lat and all(r["op_call_us"] > 0 and r["flush_us"] >= 0 for r in lat)


def test_unknown_sync_fails_clearly(cli, tmp_path, mpi_build):
    p = cli("bench", "mpi_rma", "--build", mpi_build, "--syncs", "lock,telepathy", "--out", str(tmp_path),
            check=False)
    assert p.returncode != 0 and "--syncs" in p.stderr
