"""The CUDA-aware MPI baseline's launch (benchmarks/_cuda_aware_mpi.py) and the ratios to a
baseline method that results.py adds to rows and tables."""
import os

from gpustripe import results
from gpustripe.benchmarks import _cuda_aware_mpi as cam


def _fake_wheel(root, missing=()):
    lib = root / "libucx" / "lib"
    (lib / "ucx").mkdir(parents=True)
    for name in ("libucp.so.0", "libuct.so.0", "libucs.so.0", "libucm.so.0", "ucx/libuct_cuda.so.0"):
        if name not in missing:
            (lib / name).write_bytes(b"")
    return root


def test_ucx_dir_from_the_build_source_tree(tmp_path):
    src, build = tmp_path / "src", tmp_path / "build"
    build.mkdir()
    _fake_wheel(src / ".deps" / "ucx")
    (build / "CMakeCache.txt").write_text(f"FOO:BOOL=ON\nCMAKE_HOME_DIRECTORY:INTERNAL={src}\n")
    assert cam.ucx_dir(str(build)) == str(src / ".deps" / "ucx")
    assert cam.ucx_dir(str(build), override=str(tmp_path / "x")) == str(tmp_path / "x")


def test_absent_names_what_is_missing(tmp_path):
    ok = _fake_wheel(tmp_path / "ok")
    assert cam.absent(str(ok)) == ""
    bad = _fake_wheel(tmp_path / "bad", missing=("ucx/libuct_cuda.so.0",))
    why = cam.absent(str(bad))
    assert "libuct_cuda.so.0" in why and "stage-deps" in why
    assert "libucp.so.0" in cam.absent(str(tmp_path / "none"))


def test_env_puts_the_wheel_first(tmp_path, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/other")
    env = cam.env(str(tmp_path))
    lib = os.path.join(str(tmp_path), "libucx", "lib")
    assert env["LD_LIBRARY_PATH"] == lib + ":/opt/other"
    assert env["UCX_MODULE_DIR"] == os.path.join(lib, "ucx")
    i = cam.MCA_ARGS.index("pml")
    assert cam.MCA_ARGS[i + 1] == "ucx"


def _row(op, method, b, gbps, us, window=1):
    return {"op": op, "method": method, "bytes": b, "gbps": gbps, "us": us, "window": window, "ranks": 2}


def test_add_ratios_and_table_against_a_baseline():
    rows = [_row("p2p", "base", 1024, 2.0, 1.0), _row("p2p", "ours", 1024, 3.0, 0.5),
            _row("p2p", "ours", 1024, 1.0, 0.5, window=64),  # no baseline at this window
            _row("latency", "base", 8, 0.1, 4.0), _row("latency", "ours", 8, 0.2, 2.0)]
    results.add_ratios(rows, "base")
    assert rows[0]["vs_base"] == 1.0 and rows[1]["vs_base"] == 1.5
    assert "vs_base" not in rows[2]
    assert rows[4]["vs_base"] == 0.5  # latency: in time, lower is better
    table = results.ratio_table(rows[:2], "p2p", ours="ours", base="base")
    assert "method/base" in table.splitlines()[0]
    assert table.splitlines()[-1].split()[-1] == "1.500"
    assert "method/" not in results.ratio_table(rows[:2], "p2p", ours="ours")
