"""The model's Python API and its commands: plan, simulate, calibrate, tune, model-check
(the last three on the emulated backend here: they exercise the code path, the figures
are memcpy's)."""
import json
import os

import gpustripe
import pytest


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache directory and no profile named, for this process and CLI children."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("GPUSTRIPE_PROFILE", raising=False)
    monkeypatch.delenv("GPUSTRIPE_PLAN", raising=False)
    return tmp_path


def shares(plan):
    out = {}
    for p in plan.paths:
        out[p.kind] = out.get(p.kind, 0) + p.bytes / plan.bytes
    return out


def test_h200_plan_is_direct_plus_host_without_gpu_staging(cache):
    plan = gpustripe.plan(0, 1, 256 << 20, topology="h200x4")
    s = shares(plan)
    assert "gpu" not in s, plan.describe()
    assert 0.07 < s["host"] < 0.12, plan.describe()
    assert plan.predicted_us > 0 and plan.predicted_gbps > 0
    assert plan.bottleneck
    assert sum(p.bytes for p in plan.paths) == plan.bytes
    plan.check()


def test_v100_mesh_uses_staging_gpus(cache):
    m = gpustripe.Model("beluga-v100x4")
    assert "nominal" in m.source
    plan = m.plan(0, 1, 256 << 20)
    assert [p.name for p in plan.paths if p.kind == "gpu"] == ["gpu2", "gpu3"]
    direct = m.fixed("direct", 0, 1, 256 << 20)
    assert plan.predicted_gbps / direct.predicted_gbps > 2.0
    # The spec round-trips.
    again = m.fixed(plan.spec, 0, 1, 256 << 20)
    assert [p.name for p in again.paths] == [p.name for p in plan.paths]


def test_concurrent_plans_share_the_source(cache):
    m = gpustripe.Model("beluga-v100x4")
    alone = m.plan_exact(0, 1, 256 << 20).predicted_us
    both = m.plan_concurrent([(0, 1, 256 << 20), (0, 2, 256 << 20)])
    assert len(both) == 2
    assert max(p.predicted_us for p in both) > 1.5 * alone


@pytest.mark.parametrize("args,status", [
    ((0, 1, 0), "GPUSTRIPE_ERR_INVALID_SIZE"),
    ((1, 1, 1 << 20), "GPUSTRIPE_ERR_INVALID_DEVICE"),
    ((0, 9, 1 << 20), "GPUSTRIPE_ERR_INVALID_DEVICE"),
])
def test_bad_transfers_raise(cache, args, status):
    with pytest.raises(gpustripe.Error) as e:
        gpustripe.plan(*args, topology="h200x4")
    assert e.value.status == status


def test_bad_spec_raises_config_error(cache):
    with pytest.raises(gpustripe.Error) as e:
        gpustripe.Model("h200x4").fixed("direct,warp:0.1", 0, 1, 1 << 20)
    assert e.value.status == "GPUSTRIPE_ERR_CONFIG"


# The emulated default node, even where GPUs are visible: these tests pin its profile.
EMULATED_H200X4 = {"GPUSTRIPE_BACKEND": "emulated", "GPUSTRIPE_TOPOLOGY": "h200x4"}


def test_profile_of_another_node_is_an_error_when_named(cache, cli):
    out = str(cache / "p.json")
    cli("calibrate", "--quick", "--out", out, env=EMULATED_H200X4)  # the emulated h200x4 node, also on a GPU machine
    doc = json.load(open(out))
    assert doc["fingerprint"] and doc["backend"] == "emulated"
    assert gpustripe.Model("h200x4", profile=out).source.startswith("profile")
    with pytest.raises(gpustripe.Error) as e:
        gpustripe.Model("h200x8", profile=out)
    assert e.value.status == "GPUSTRIPE_ERR_PROFILE"
    p = cli("plan", "--topology", "h200x8", "--profile", out, check=False)
    assert p.returncode != 0 and "does not belong" in p.stderr


def test_plan_command_prints_paths_bottleneck_and_source(cache, cli):
    out = cli("plan", "--topology", "h200x4", "--src", "0", "--dst", "1", "--size", "256M").stdout
    assert "host0" in out and "direct" in out
    assert "bottleneck:" in out and "GB/s" in out
    assert "nominal figures" in out and "gpustripe calibrate" in out
    doc = json.loads(cli("plan", "--topology", "beluga-v100x4", "--json").stdout)
    assert {p["path"] for p in doc["plans"][0]["paths"]} >= {"direct", "gpu2", "gpu3"}
    conc = cli("plan", "--topology", "beluga-v100x4", "--concurrent", "0>1,1>0").stdout
    assert conc.count("transfer ") == 2 and "all done after" in conc
    bad = cli("plan", "--topology", "h200x4", "--concurrent", "0-1", check=False)
    assert bad.returncode != 0


def test_simulate_writes_the_plot_and_prints_the_papers(cache, cli, tmp_path):
    out = cli("simulate", "--topology", "beluga-v100x4", "--out", str(tmp_path), "--min-size", "1M",
              "--max-size", "256M").stdout
    assert "2.85x" in out and "x over the direct path" in out
    pngs = [f for f in os.listdir(tmp_path) if f.endswith(".png")]
    assert pngs and os.path.getsize(tmp_path / pngs[0]) > 1000


def test_calibrate_shows_progress_and_a_summary(cache, cli):
    p = cli("calibrate", "--quick", "--out", str(cache / "c.json"), env=EMULATED_H200X4)
    assert "100%" in p.stderr and "emulated" in p.stderr
    assert "epsilon" in p.stdout and "pcie_d2h[gpu0]" in p.stdout
    assert "host cost per enqueue call" in p.stdout and "copies issued by gpu0 at once" in p.stdout
    shown = cli("calibrate", "--show", str(cache / "c.json")).stdout
    assert "alpha_us" in shown


def test_model_check_writes_results_rows(cache, cli, tmp_path, four_devices):
    from gpustripe import results

    out = cli("model-check", "--sizes", "1M,4M", "--exhaustive-sizes", "4M", "--reps", "2", "--quick",
              "--out", str(tmp_path)).stdout
    assert "predicted" in out and "exhaustive best" in out
    files = [f for f in os.listdir(tmp_path) if f.endswith(".json")]
    doc = results.load(str(tmp_path / files[0]))
    assert all(r["op"] == "model" and "predicted_gbps" in r and "paths" in r for r in doc["rows"])
    assert {r["method"] for r in doc["rows"]} >= {"gpustripe direct", "gpustripe all paths"}
    assert doc["exhaustive"][0]["candidates"] > 1
    assert os.path.exists(tmp_path / files[0].replace(".json", ".png"))
    # The printed table is kept beside them, and every row says what bounds its prediction.
    table = open(tmp_path / files[0].replace(".json", ".txt")).read()
    assert table.startswith("node:") and "model error over" in table
    assert all("bottleneck" in r and "path_set" in r for r in doc["rows"])


def test_model_check_restricts_sets_and_rejects_unknown_ones(cache, cli, tmp_path):
    from gpustripe import results

    cli("model-check", "--sizes", "1M", "--sets", "direct,direct+host", "--exhaustive-sizes", "none", "--reps", "2",
        "--warmup", "1", "--concurrent-sizes", "none", "--out", str(tmp_path))
    files = [f for f in os.listdir(tmp_path) if f.endswith(".json")]
    doc = results.load(str(tmp_path / files[0]))
    assert {r["path_set"] for r in doc["rows"]} == {"direct", "direct+host"}
    bad = cli("model-check", "--sizes", "1M", "--sets", "direct,teleport", "--exhaustive-sizes", "none",
              "--out", str(tmp_path), check=False)
    assert bad.returncode != 0 and "teleport" in (bad.stderr + bad.stdout)


def test_model_check_concurrent_cases_predicted_and_measured(cache, cli, tmp_path, four_devices):
    from gpustripe import results

    out = cli("model-check", "--sizes", "1M", "--sets", "direct", "--exhaustive-sizes", "none", "--reps", "2",
              "--trials", "1", "--warmup", "1", "--concurrent-sizes", "256K,1M", "--out", str(tmp_path)).stdout
    assert "concurrent transfers" in out and "model error over 12 concurrent points" in out
    files = [f for f in os.listdir(tmp_path) if f.endswith(".json")]
    doc = results.load(str(tmp_path / files[0]))
    conc = [r for r in doc["rows"] if r["path_set"].startswith("concurrent")]
    # one pair both ways (on GPUs 0 and 1 also the 2-GPU ring), the 4-GPU ring, and the ring both ways
    cases = {r["case"]: r["transfers"] for r in conc}
    assert cases == {"both ways (ring 2)": [[0, 1], [1, 0]], "ring 4": [[0, 1], [1, 2], [2, 3], [3, 0]],
                     "ring 4 both ways": [[0, 1], [1, 2], [2, 3], [3, 0], [0, 3], [1, 0], [2, 1], [3, 2]]}
    assert {(r["case"], r["path_set"], r["bytes"]) for r in conc} == {
        (c, k, b) for c in cases for k in ("concurrent planned", "concurrent direct") for b in (256 << 10, 1 << 20)}
    for r in conc:
        assert r["us"] > 0 and r["predicted_us"] > 0 and r["paths"].count("|") == len(r["transfers"]) - 1
        assert abs(r["aggregate_gbps"] - r["gbps"] * len(r["transfers"])) < 1e-6 * r["aggregate_gbps"]
        assert r["error"] == pytest.approx((r["predicted_gbps"] - r["gbps"]) / r["gbps"])
    assert all(r["vs_direct"] > 0 for r in conc if r["path_set"] == "concurrent planned")
    assert doc["concurrent_max_abs_error"] >= doc["concurrent_mean_abs_error"] > 0
    assert doc["concurrent_skipped"] == {}


def test_concurrent_cases_of_a_two_gpu_node():
    from gpustripe.commands.model_check_concurrent import cases, timer_bytes

    todo, skipped = cases(2, 0, 1)
    assert todo == [("both ways (ring 2)", [(0, 1), (1, 0)])] and "4 GPUs" in skipped["ring 4"]
    todo, _ = cases(4, 2, 3)
    assert [n for n, _ in todo] == ["both ways", "ring 2", "ring 4", "ring 4 both ways"]
    assert timer_bytes([1 << 20], 4, 0, 1) == 2 << 20  # ring both ways: two sends from each GPU
    assert timer_bytes([1 << 20], 2, 0, 1) == 1 << 20


def test_model_check_times_fixed_points_isolated_with_the_hosts_time(cache, cli, tmp_path):
    from gpustripe import results

    cli("model-check", "--points", "1M@direct;2M@direct:0.75,host0:0.25x2", "--timing", "isolated", "--reps", "2",
        "--warmup", "1", "--out", str(tmp_path))
    files = [f for f in os.listdir(tmp_path) if f.endswith(".json")]
    doc = results.load(str(tmp_path / files[0]))
    rows = doc["rows"]
    assert [r["path_set"] for r in rows] == ["direct", "direct:0.75,host0:0.25x2"]
    assert [r["bytes"] for r in rows] == [1 << 20, 2 << 20]
    assert all(r["timing"] == "isolated" and r["host_us"] > 0 for r in rows)
    assert rows[1]["paths"] == "direct:0.7500x1,host0:0.2500x2"
    assert "exhaustive" not in open(tmp_path / files[0].replace(".json", ".txt")).read()
    bad = cli("model-check", "--points", "1M:direct", "--out", str(tmp_path), check=False)
    assert bad.returncode != 0 and "SIZE@SPEC" in (bad.stderr + bad.stdout)


def test_model_check_times_short_points_in_more_trials():
    from gpustripe.commands.model_check import MAX_TRIALS, REPS, auto_trials

    assert REPS == 20  # a trial is timed as bench p2p times a row
    assert auto_trials(35.0) == MAX_TRIALS  # a 4 MB plan: capped
    assert auto_trials(200.0) == 5  # 20 ms of it
    assert auto_trials(2500.0) == 1  # 1 GB: one trial, as bench p2p
    assert auto_trials(0.0) == 1


def test_model_check_states_its_statistic_keeps_every_repetition_and_measures_the_host(cache, cli, tmp_path, four_devices):
    from gpustripe import results

    out = cli("model-check", "--sizes", "1M", "--sets", "direct,all paths", "--exhaustive-sizes", "none",
              "--warmup", "1", "--reps", "3", "--concurrent-sizes", "64K", "--out", str(tmp_path)).stdout
    assert "median of all repetitions of 1-20" in out and "from a drained stream" in out
    assert "host cost per engine call, measured in this process" in out
    files = [f for f in os.listdir(tmp_path) if f.endswith(".json")]
    doc = results.load(str(tmp_path / files[0]))
    for r in doc["rows"]:
        assert r["reps"] == 3 and 1 <= r["trials"] <= 20 and len(r["rep_us"]) == r["reps"] * r["trials"]
        assert min(r["rep_us"]) - 0.01 <= r["us"] <= max(r["rep_us"]) + 0.01
    assert doc["host_cost"]["used"].startswith("measured") and doc["host_cost"]["measured_us"] > 0
    # measured again before each point, and kept in the row
    assert len(doc["host_cost"]["points_us"]) == len(doc["rows"]) and "median of" in doc["statistic"]
    assert [r["host_cost_us"] for r in doc["rows"]] == doc["host_cost"]["points_us"]
    assert "host cost per engine call before the points" in out
    assert "measured in this process" in doc["model_source"]
    # The profile's figure, where asked for.
    prof = tmp_path / "profile"
    cli("model-check", "--sizes", "1M", "--sets", "direct", "--exhaustive-sizes", "none", "--reps", "2",
        "--trials", "2", "--host-cost", "profile", "--concurrent-sizes", "none", "--out", str(prof))
    doc = results.load(str(prof / [f for f in os.listdir(prof) if f.endswith(".json")][0]))
    assert doc["host_cost"]["used"] == "profile" and "measured in this process" not in doc["model_source"]
    assert [r["host_cost_us"] for r in doc["rows"]] == [None]
    assert [len(r["rep_us"]) for r in doc["rows"]] == [4]


def test_tune_writes_a_table_the_planner_uses(cache, cli, monkeypatch):
    table = str(cache / "table.json")
    cli("tune", "--exhaustive", "--sizes", "1M", "--quick", "--reps", "1", "--out", table)
    doc = json.load(open(table))
    spec = doc["entries"][0]["spec"]
    monkeypatch.setenv("GPUSTRIPE_PLAN", "table")
    monkeypatch.setenv("GPUSTRIPE_PLAN_TABLE", table)
    ctx = gpustripe.Context()
    assert ctx.plan(0, 1, 1 << 20) == gpustripe.Model().fixed(spec, 0, 1, 1 << 20).describe()
