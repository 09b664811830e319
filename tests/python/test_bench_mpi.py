"""gpustripe bench mpi: one launch per method and rank count, rows split into one results
file per window, methods that cannot run skipped with their reason (emulated devices in CI:
no host-staged pattern, no NCCL). Needs the MPI clients built (an MPI was found)."""
import glob
import json
import os
import shutil

import pytest

BUILD = os.environ.get("GPUSTRIPE_BUILD_DIR", "build/dev")


@pytest.fixture
def mpi_build():
    if not shutil.which("mpirun") or not os.path.exists(os.path.join(BUILD, "bench/mpi/mpi_bench")):
        pytest.skip("no mpirun or MPI clients not built")
    return BUILD


def test_quick_mpi_bench_files_per_window(cli, tmp_path, mpi_build):
    methods = "mpi_gpustripe,mpi_cuda_aware,gpustripe,nccl,ucx,mpi_host_staged"
    p = cli("bench", "mpi", "--build", mpi_build, "--ranks", "2", "--windows", "1,4", "--bibw-window", "4",
            "--sizes", "1K:64K", "--latency-sizes", "8:64", "--iters", "2", "--methods", methods,
            "--out", str(tmp_path), "--timeout", "120")
    docs = {}
    for f in glob.glob(str(tmp_path / "*-mpi-np2-w*.json")):
        doc = json.load(open(f))
        docs[doc["window"]] = doc
        assert glob.glob(f[:-5] + ".png")
    assert set(docs) == {1, 4}
    # one launch per method, every sweep in it
    launches = [line for line in p.stdout.splitlines() if line.strip().startswith("$ ")]
    ours = [x for x in launches if "--method mpi_gpustripe" in x]
    assert len(ours) == 1 and ours[0].count("--sweep") == 4
    assert len([x for x in launches if "gs_p2p_bench" in x]) == 1
    w1, w4 = docs[1]["rows"], docs[4]["rows"]
    assert {r["window"] for r in w1} == {1} and {(r["op"], r["window"]) for r in w4} >= {("p2p", 4), ("bibw", 4)}
    assert {r["op"] for r in w1} == {"p2p"}
    lat = [r for r in w4 if r["op"] == "latency"]  # latency goes with the last window
    assert lat and {r["bytes"] for r in lat} == {8, 16, 32, 64}
    for doc in docs.values():
        assert doc["ranks"] == 2 and doc["schema"] == 1
        present = {r["method"] for r in doc["rows"]}
        assert {"mpi_gpustripe", "gpustripe"} <= present
        for m in methods.split(","):
            assert (m in present) != (m in doc["methods_absent"]), m  # measured, or skipped with a reason
        for r in doc["rows"]:
            assert r["gbps"] >= 0 and r["us"] > 0 and r["bytes"] <= 64 << 10
    if docs[1]["emulated"]:
        assert "nccl" in docs[1]["methods_absent"] and "mpi_host_staged" in docs[1]["methods_absent"]
    # every row against the CUDA-aware MPI of the same run, where it ran
    if "mpi_cuda_aware" not in docs[4]["methods_absent"]:
        aware = [x for x in launches if "--method mpi_cuda_aware" in x]
        assert len(aware) == 1 and "--mca pml ucx" in aware[0] and "LD_PRELOAD" not in aware[0]
        assert "/libucx/lib" in aware[0] and "UCX_MODULE_DIR=" in aware[0]
        for doc in docs.values():
            assert doc["baseline"] == "mpi_cuda_aware"
            for r in doc["rows"]:
                if r["method"] == "mpi_cuda_aware":
                    assert r["vs_mpi_cuda_aware"] == 1.0
                else:
                    assert r["vs_mpi_cuda_aware"] > 0
        assert "mpi_gpustripe/" in p.stdout  # the tables' method/baseline columns


def test_rounds_take_turns_and_keep_the_median_round(cli, tmp_path, mpi_build):
    """--rounds: every method launched that many times, every other round in reverse order; each size's
    row is the round with the median time, every round's beside it."""
    p = cli("bench", "mpi", "--build", mpi_build, "--ranks", "2", "--windows", "1", "--bibw-window", "0",
            "--sizes", "1K:2K", "--latency-sizes", "", "--iters", "2", "--methods", "mpi_gpustripe,gpustripe",
            "--rounds", "3", "--out", str(tmp_path), "--timeout", "120")
    launches = [line.strip() for line in p.stdout.splitlines() if line.strip().startswith("$ ")]
    who = ["ours" if "--method mpi_gpustripe" in x else "native" if "gs_p2p_bench" in x else "other" for x in launches]
    assert who == ["ours", "native", "native", "ours", "ours", "native"], launches
    (f,) = glob.glob(str(tmp_path / "*-mpi-np2-w1-*.json"))
    rows = json.load(open(f))["rows"]
    assert sorted((r["method"], r["bytes"]) for r in rows) == sorted(
        (m, b) for m in ("mpi_gpustripe", "gpustripe") for b in (1024, 2048))
    for r in rows:
        assert len(r["rounds_us"]) == 3 and r["us"] == sorted(r["rounds_us"])[1], r


def test_variants_take_turns_under_their_settings_or_another_build(cli, tmp_path, mpi_build):
    """--variants: the interposer again under other GPUSTRIPE_ settings, or another tree's library
    (interposer=PATH), as methods mpi_gpustripe_<name> launched in turns with the others; every one's rows
    are in the files. Keys of neither kind, and a library that is not there, are refused."""
    lib = os.path.join(mpi_build, "src", "mpi", "libgpustripe_mpi.so")
    other = tmp_path / "other.so"
    shutil.copy(lib, other)
    p = cli("bench", "mpi", "--build", mpi_build, "--ranks", "2", "--windows", "1", "--bibw-window", "0",
            "--sizes", "1K:1K", "--latency-sizes", "", "--iters", "2", "--methods", "mpi_gpustripe",
            "--variants", f"slots:GPUSTRIPE_TEST=offers=no;b:interposer={other}", "--rounds", "2",
            "--out", str(tmp_path), "--timeout", "120")
    launches = [line.strip() for line in p.stdout.splitlines() if line.strip().startswith("$ ")]
    who = [x.split("--method ")[-1].split()[0] for x in launches if "--method " in x]
    one = ["mpi_gpustripe", "mpi_gpustripe_slots", "mpi_gpustripe_b"]
    assert who == one + one[::-1], launches  # the second round in reverse order
    slots = next(x for x in launches if "--method mpi_gpustripe_slots" in x)
    b = next(x for x in launches if "--method mpi_gpustripe_b" in x)
    assert "GPUSTRIPE_TEST=offers=no" in slots and f"LD_PRELOAD={lib}" in slots
    assert f"LD_PRELOAD={other}" in b and "GPUSTRIPE_TEST" not in b
    (f,) = glob.glob(str(tmp_path / "*-mpi-np2-w1-*.json"))
    assert {r["method"] for r in json.load(open(f))["rows"]} == {"mpi_gpustripe", "mpi_gpustripe_slots",
                                                                 "mpi_gpustripe_b"}
    for bad, why in (("x:tuning=1", "a GPUSTRIPE_ setting or interposer=PATH"),
                     (f"x:interposer={tmp_path / 'none.so'}", "does not exist"),
                     ("x@allreduce:GPUSTRIPE_TEST=a", "bench coll's")):
        r = cli("bench", "mpi", "--build", mpi_build, "--variants", bad, "--out", str(tmp_path), check=False)
        assert r.returncode != 0 and why in r.stderr, (bad, r.stderr)


def test_rounds_below_one_are_refused_by_every_mpi_bench(cli, tmp_path):
    for bench in ("mpi", "mpi_coll", "halo"):
        r = cli("bench", bench, "--rounds", "0", "--out", str(tmp_path), check=False)
        assert r.returncode != 0 and "--rounds: at least 1" in r.stderr, (bench, r.stderr)


def test_cuda_aware_method_absent_without_ucx(cli, tmp_path, mpi_build):
    p = cli("bench", "mpi", "--build", mpi_build, "--ranks", "2", "--windows", "1", "--sizes", "1K:1K",
            "--latency-sizes", "", "--iters", "1", "--methods", "mpi_gpustripe,mpi_cuda_aware",
            "--ucx-dir", str(tmp_path / "no-ucx"), "--out", str(tmp_path), "--timeout", "60")
    (f,) = glob.glob(str(tmp_path / "*-mpi-np2-w1*.json"))
    doc = json.load(open(f))
    assert "no CUDA-enabled UCX" in doc["methods_absent"]["mpi_cuda_aware"]
    assert {r["method"] for r in doc["rows"]} == {"mpi_gpustripe"}
    assert "--mca pml ucx" not in p.stdout


def test_unknown_method_fails_clearly(cli, tmp_path, mpi_build):
    p = cli("bench", "mpi", "--build", mpi_build, "--methods", "mpi_gpustripe,carrier_pigeon",
            "--out", str(tmp_path), check=False)
    assert p.returncode != 0 and "carrier_pigeon" in p.stderr


def test_mpi_coll_bench_times_the_host_waiting_pace(cli, tmp_path, mpi_build):
    """gpustripe_sync (the native communicator, its host waiting for each call) runs beside the
    interposer and the back-to-back native method, and the tables print the interposer's ratio to it."""
    methods = "mpi_gpustripe,gpustripe,gpustripe_sync"
    p = cli("bench", "mpi_coll", "--build", mpi_build, "--ranks", "2", "--sizes", "64K:128K",
            "--ops", "allreduce,reduce_scatter_v", "--allreduce-dtypes", "int8", "--methods", methods,
            "--iters", "2", "--trials", "1", "--warmup", "1", "--out", str(tmp_path), "--timeout", "120")
    (f,) = glob.glob(str(tmp_path / "*mpi-coll-2gpu*.json"))
    doc = json.load(open(f))
    assert doc["schema"] == 1
    got = {(r["op"], r["method"], r["bytes"]) for r in doc["rows"]}
    for op in ("allreduce", "reduce_scatter_v", "allreduce_int8"):
        for m in methods.split(","):
            assert {(op, m, 64 << 10), (op, m, 128 << 10)} <= got, (op, m)
    assert all(r.get("dtype") for r in doc["rows"])  # every method's rows: where-we-lose compares by type
    for r in doc["rows"]:
        if r["method"] == "gpustripe_sync":
            assert r["us"] > 0 and r["schedule"], r
    for op in ("allreduce", "reduce_scatter_v", "allreduce_int8"):
        table = p.stdout.split(f"[2 ranks] {op}:")[1].split("\n\n")[0]
        assert "mpi_gpustripe/method" in table and "/gpustripe_sync" in table, table


def test_mpi_coll_bench_times_both_forms_in_one_process(cli, tmp_path, mpi_build):
    """Asked for both, the blocking and the nonblocking forms come from one mpirun whose batches take
    turns (mpi_coll_bench --paired): one row of each per size, the nonblocking one with its overlap."""
    p = cli("bench", "mpi_coll", "--build", mpi_build, "--ranks", "2", "--sizes", "64K:128K", "--ops", "allgather",
            "--methods", "mpi_gpustripe,mpi_gpustripe_nb", "--iters", "2", "--trials", "2", "--warmup", "1",
            "--out", str(tmp_path), "--timeout", "120")
    launches = [line for line in p.stdout.splitlines() if line.strip().startswith("$ ") and "mpi_coll_bench" in line]
    assert len(launches) == 1 and "--paired" in launches[0], launches
    (f,) = glob.glob(str(tmp_path / "*mpi-coll-2gpu*.json"))
    rows = json.load(open(f))["rows"]
    for m in ("mpi_gpustripe", "mpi_gpustripe_nb"):
        assert sorted(r["bytes"] for r in rows if r["method"] == m) == [64 << 10, 128 << 10], (m, rows)
    assert all("overlap_pct" in r for r in rows if r["method"] == "mpi_gpustripe_nb")
    assert not any("overlap_pct" in r for r in rows if r["method"] == "mpi_gpustripe")


def test_mpi_coll_bench_variants_take_turns_with_the_default_launch(cli, tmp_path, mpi_build):
    """--variants: one launch of the interposer per variant after the default one's, its tuning fields as
    GPUSTRIPE_TEST's coll.NAME items and its GPUSTRIPE_ settings as they are, @ limiting its ops; --rounds
    repeats the launches taking turns and keeps per size the median round, every round's busbw beside it."""
    p = cli("bench", "mpi_coll", "--build", mpi_build, "--ranks", "2", "--sizes", "64K:128K",
            "--ops", "allgather,allreduce", "--methods", "mpi_gpustripe", "--allreduce-dtypes", "",
            "--iters", "2", "--trials", "2", "--warmup", "1", "--rounds", "3",
            "--variants", "tuned@allreduce:oneshot_max=0,push_max=1G;algo:GPUSTRIPE_COLL_ALGO=all_at_once",
            "--out", str(tmp_path), "--timeout", "120")
    launches = [line.strip() for line in p.stdout.splitlines()
                if line.strip().startswith("$ ") and "mpi_coll_bench" in line]
    methods = [x.split("--method ")[1].split()[0] for x in launches]
    turn = ["mpi_gpustripe", "mpi_gpustripe_tuned", "mpi_gpustripe_algo"]
    assert methods == turn + turn[::-1] + turn, methods  # every other round in reverse order
    tuned = [x for x in launches if "mpi_gpustripe_tuned" in x]
    assert all("GPUSTRIPE_TEST=coll.oneshot_max=0,coll.push_max=1G" in x and "--ops allreduce " in x for x in tuned)
    algo = [x for x in launches if "mpi_gpustripe_algo" in x]
    assert all("GPUSTRIPE_COLL_ALGO=all_at_once" in x and "GPUSTRIPE_TEST" not in x for x in algo)
    assert all("--ops allgather,allreduce " in x for x in algo)
    (f,) = glob.glob(str(tmp_path / "*mpi-coll-2gpu*.json"))
    rows = json.load(open(f))["rows"]
    got = sorted((r["method"], r["op"], r["bytes"]) for r in rows)
    want = sorted([(m, op, b) for m, ops in (("mpi_gpustripe", ("allgather", "allreduce")),
                                             ("mpi_gpustripe_tuned", ("allreduce",)),
                                             ("mpi_gpustripe_algo", ("allgather", "allreduce")))
                   for op in ops for b in (64 << 10, 128 << 10)])
    assert got == want
    for r in rows:
        rounds = r["rounds_busbw_gbps"]
        assert len(rounds) == 3 and r["busbw_gbps"] == sorted(rounds)[1], r


def test_mpi_coll_bench_refuses_a_variant_of_an_op_not_timed(cli, tmp_path, mpi_build):
    p = cli("bench", "mpi_coll", "--build", mpi_build, "--ranks", "2", "--ops", "allgather",
            "--variants", "x@allreduce:oneshot_max=0", "--out", str(tmp_path), check=False)
    assert p.returncode != 0 and "allreduce" in (p.stderr + p.stdout)
