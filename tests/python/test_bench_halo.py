"""gpustripe bench halo: the halo application (apps/halo) run every way that can run here,
checked against one process, one results file per variant with the ratios to the
CUDA-aware MPI and NCCL. On the emulated backend the host steps and the interposer's
halos are its emulated devices' memory; NCCL is absent (needs GPUs)."""
import glob
import json
import os
import shutil
from types import SimpleNamespace

import pytest

BUILD = os.environ.get("GPUSTRIPE_BUILD_DIR", "build/dev")


@pytest.fixture
def halo_build():
    if not shutil.which("mpirun") or not os.path.exists(os.path.join(BUILD, "apps/halo/halo")):
        pytest.skip("no mpirun or the halo application not built")
    return BUILD


def test_halo_every_way_checked_with_ratios(cli, tmp_path, halo_build):
    p = cli("bench", "halo", "--build", halo_build, "--ranks", "2", "--shapes", "8x4K,16x1K", "--iters", "2",
            "--warmup", "1", "--out", str(tmp_path), "--timeout", "120")
    docs = {}
    for f in glob.glob(str(tmp_path / "*-halo-np2-*.json")):
        doc = json.load(open(f))
        docs[doc["variant"]] = doc
        assert os.path.exists(f[:-5] + ".png")
    assert set(docs) == {"sendrecv", "isend"}
    for v, doc in docs.items():
        assert doc["schema"] == 1 and doc["ranks"] == 2
        present = {r["method"] for r in doc["rows"]}
        for m in ("mpi_host_staged", "mpi_cuda_aware", "mpi_gpustripe", "nccl"):
            assert (m in present) != (m in doc["methods_absent"]), m
        assert {"mpi_host_staged", "mpi_gpustripe"} <= present
        for r in doc["rows"]:
            assert r["op"] == "halo" and r["variant"] == v and r["max_abs_err"] == 0
            assert r["shape"] in {"8x4096", "16x1024"} and r["bytes"] == r["cols"] * 8
            assert r["us"] > 0 and r["us_exchange"] > 0 and r["gbps"] > 0
            if r["method"] != "nccl":  # an iteration's split: the wait for the step, the exchange behind it
                assert 0 <= r["us_wait_step"] <= r["us"] and 0 < r["us_exchange_in_iter"] <= r["us"]
            else:
                assert "us_wait_step" not in r
            if "mpi_cuda_aware" in present:
                assert r["vs_mpi_cuda_aware"] > 0
        if doc["emulated"]:
            assert "nccl" in doc["methods_absent"]
        # the series bound belongs to sendrecv only: two one-way times, so above either alone
        bounds = [r.get("bound_us_exchange") for r in doc["rows"]]
        if v == "sendrecv":
            assert all(b is not None and b > 0 for b in bounds)
        else:
            assert all(b is None for b in bounds)
    # one launch per method, every shape and variant in it
    launches = [x for x in p.stdout.splitlines() if x.strip().startswith("$ ")]
    ours = [x for x in launches if "--method mpi_gpustripe" in x]
    assert len(ours) == 1 and "LD_PRELOAD=" in ours[0] and ours[0].count("--shape") == 2
    assert "--exchange sendrecv,isend" in ours[0] and "--check" in ours[0]
    assert "the least exchange time of MPI_Sendrecv up then down" in p.stdout
    assert "gpustripe vs cuda_aware" in p.stdout or "mpi_cuda_aware" in docs["isend"]["methods_absent"]


def test_halo_rounds_take_turns_and_keep_the_median_round(cli, tmp_path, halo_build):
    """--rounds: each method launched that many times, every other round in reverse order; each shape's row
    is the round with the median time per iteration, every round's beside it."""
    p = cli("bench", "halo", "--build", halo_build, "--ranks", "2", "--shapes", "8x4K", "--iters", "2",
            "--warmup", "1", "--variants", "isend", "--methods", "mpi_host_staged,mpi_gpustripe", "--rounds", "3",
            "--out", str(tmp_path), "--timeout", "120")
    launches = [x for x in p.stdout.splitlines() if x.strip().startswith("$ ")]
    ours = ["--method mpi_gpustripe" in x for x in launches]
    assert ours == [False, True, True, False, False, True], launches
    (f,) = glob.glob(str(tmp_path / "*-halo-np2-isend*.json"))
    rows = json.load(open(f))["rows"]
    assert sorted(r["method"] for r in rows) == ["mpi_gpustripe", "mpi_host_staged"]
    for r in rows:
        assert len(r["rounds_us"]) == 3 and r["us"] == sorted(r["rounds_us"])[1] and r["max_abs_err"] == 0


def test_halo_interposer_variants_take_turns(cli, tmp_path, halo_build):
    """--interposers: the interposer again under other settings, as method mpi_gpustripe_<name>, launched in
    turns with the others, checked like them, in the tables and files with its ratios."""
    p = cli("bench", "halo", "--build", halo_build, "--ranks", "2", "--shapes", "8x1K", "--iters", "2", "--warmup",
            "1", "--variants", "isend", "--methods", "mpi_gpustripe", "--interposers", "slots:GPUSTRIPE_TEST=offers=no",
            "--rounds", "2", "--min-ms", "0", "--out", str(tmp_path), "--timeout", "120")
    launches = [x.strip() for x in p.stdout.splitlines() if x.strip().startswith("$ ")]
    who = [x.split("--method ")[-1].split()[0] for x in launches]
    assert who == ["mpi_gpustripe", "mpi_gpustripe_slots", "mpi_gpustripe_slots", "mpi_gpustripe"], launches
    assert all("LD_PRELOAD=" in x and "--mem hook" in x for x in launches)
    assert ("GPUSTRIPE_TEST=offers=no" in launches[1]) and "GPUSTRIPE_TEST" not in launches[0]
    assert "gpustripe_slots" in p.stdout  # a column of the tables
    (f,) = glob.glob(str(tmp_path / "*-halo-np2-isend*.json"))
    rows = json.load(open(f))["rows"]
    assert sorted(r["method"] for r in rows) == ["mpi_gpustripe", "mpi_gpustripe_slots"]
    assert all(r["max_abs_err"] == 0 for r in rows)
    bad = cli("bench", "halo", "--build", halo_build, "--interposers", "x:tuning=1", "--out", str(tmp_path),
              check=False)
    assert bad.returncode != 0 and "--interposers" in bad.stderr and "interposer=PATH" in bad.stderr


def test_halo_short_loops_run_more_iterations(cli, tmp_path, halo_build):
    """--min-ms: a shape whose --iters iterations would end sooner is timed over more of them, as many on every
    rank (the row's iters), and the check steps the reference through all of them; --min-ms 0 keeps --iters."""
    counts = {}
    for min_ms in ("0", "200"):
        out = tmp_path / min_ms
        cli("bench", "halo", "--build", halo_build, "--ranks", "2", "--shapes", "8x1K", "--iters", "2", "--warmup",
            "1", "--variants", "isend", "--methods", "mpi_host_staged", "--min-ms", min_ms, "--out", str(out),
            "--timeout", "120")
        (f,) = glob.glob(str(out / "*-halo-np2-isend*.json"))
        doc = json.load(open(f))
        assert doc["min_ms"] == float(min_ms)
        (r,) = doc["rows"]
        assert r["max_abs_err"] == 0
        counts[min_ms] = r["iters"]
    assert counts["0"] == 2 and counts["200"] > 2, counts


def test_halo_rejects_bad_shapes_and_methods(cli, tmp_path, halo_build):
    bad = cli("bench", "halo", "--build", halo_build, "--shapes", "8by4M", "--out", str(tmp_path), check=False)
    assert bad.returncode != 0 and "ROWSxCOLS" in bad.stderr
    bad = cli("bench", "halo", "--build", halo_build, "--methods", "mpi_gpustripe,telegraph", "--out",
              str(tmp_path), check=False)
    assert bad.returncode != 0 and "telegraph" in bad.stderr


def _row(method, shape, us, variant="sendrecv"):
    return {"op": "halo", "method": method, "variant": variant, "shape": shape, "ranks": 2, "bytes": 8, "us": us,
            "us_exchange": us / 2, "gbps": 1.0}


def test_halo_ratios_and_table_on_a_fake_run(tmp_path):
    from gpustripe import results
    from gpustripe.benchmarks import halo

    rows = [_row("mpi_cuda_aware", "8x4M", 200.0), _row("nccl", "8x4M", 100.0), _row("mpi_gpustripe", "8x4M", 160.0),
            _row("mpi_gpustripe", "8x16M", 50.0)]  # no base at this shape
    halo.add_ratios(rows)
    assert rows[2]["vs_mpi_cuda_aware"] == 1.25 and rows[2]["vs_nccl"] == 0.625
    assert rows[0]["vs_mpi_cuda_aware"] == 1.0 and "vs_nccl" not in rows[3]
    text = halo.table(rows, "us")
    assert "gpustripe vs cuda_aware" in text and "gpustripe vs nccl" in text
    line = next(x for x in text.splitlines() if x.strip().startswith("8x4M"))
    assert "1.250" in line and "0.625" in line
    path = results.write("halo-np2-sendrecv", "fake", 2, rows, out_dir=str(tmp_path), plot=False)
    assert results.load(path)["rows"][2]["vs_nccl"] == 0.625  # op "halo" is a known op
    assert os.path.exists(halo.plot(rows, "fake", str(tmp_path / "p.png")))


def test_halo_command_lines(monkeypatch, tmp_path):
    from gpustripe.benchmarks import halo

    args = SimpleNamespace(mpirun="mpirun", iters=4, warmup=1, min_ms=20.0, no_check=False)
    monkeypatch.setenv("GPUSTRIPE_NCCL_LIBRARY", "/x/libnccl.so.2")
    shapes, variants = [(8, 1 << 22)], ["isend"]
    gpu = {m: halo.command(args, m, 2, "/b/halo", "/b/libgpustripe_mpi.so", str(tmp_path), shapes, variants, False)
           for m in halo.METHODS}
    assert "--way unaware" in " ".join(gpu["mpi_host_staged"]) and "LD_PRELOAD" not in " ".join(gpu["mpi_host_staged"])
    aware = " ".join(gpu["mpi_cuda_aware"])
    assert "--mca pml ucx" in aware and f"UCX_MODULE_DIR={tmp_path}/libucx/lib/ucx" in aware and "--way aware" in aware
    assert "LD_PRELOAD=/b/libgpustripe_mpi.so" in " ".join(gpu["mpi_gpustripe"])
    assert "--way nccl" in " ".join(gpu["nccl"]) and "--nccl-lib /x/libnccl.so.2" in " ".join(gpu["nccl"])
    assert all("--shape 8x4194304" in " ".join(c) and "--compute" not in c for c in gpu.values())
    assert all("--iters 4 --warmup 1 --min-ms 20" in " ".join(c) for c in gpu.values())
    emu = halo.command(args, "mpi_gpustripe", 2, "/b/halo", "/b/i.so", str(tmp_path), shapes, variants, True)
    assert emu[-4:] == ["--compute", "host", "--mem", "hook"]
    assert halo.parse_shapes("8x4M, 16384x16K") == [(8, 4 << 20), (16384, 16 << 10)]
