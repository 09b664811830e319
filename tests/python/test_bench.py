"""gpustripe bench p2p|bibw: discovery of benchmark modules, a quick run on this node
(emulated devices in CI), and the results file it writes."""
import json
import glob

from gpustripe.commands import bench


def test_benchmark_modules_are_discovered():
    names = [m.NAME for m in bench.discover()]
    assert "p2p" in names and "bibw" in names


def test_quick_p2p_writes_results(cli, tmp_path):
    p = cli("bench", "p2p", "--quick", "--out", str(tmp_path))
    assert "/cudaMemcpyPeerAsync" in p.stdout  # the ratio column of the table
    files = glob.glob(str(tmp_path / "*-p2p-*.json"))
    assert len(files) == 1 and glob.glob(str(tmp_path / "*-p2p-*.png"))
    doc = json.load(open(files[0]))
    assert doc["schema"] == 1 and doc["gpus"] >= 2
    methods = {r["method"] for r in doc["rows"]}
    assert {"gpustripe", "cudaMemcpyPeerAsync"} <= methods
    ops = {r["op"] for r in doc["rows"]}
    assert ops == {"p2p", "latency"}
    for r in doc["rows"]:
        assert r["gbps"] > 0 and r["us"] > 0
    if doc["emulated"]:
        assert doc["device"] == "emulated-h200x4"
        assert "emulated devices" in p.stdout and "not GPU figures" in p.stdout
        assert any("nccl" in m for m in doc["methods_absent"])
    # the planner's split of the large sizes is recorded with the gpustripe rows
    big = [r for r in doc["rows"] if r["method"] == "gpustripe" and r["op"] == "p2p" and r["bytes"] >= 64 << 20]
    assert big and all("plan" in r for r in big)


def test_quick_bibw_counts_both_directions(cli, tmp_path, four_devices):
    cli("bench", "bibw", "--quick", "--sizes", "1M,16M", "--pairs", "1-2", "--out", str(tmp_path))
    doc = json.load(open(glob.glob(str(tmp_path / "*-bibw-*.json"))[0]))
    rows = doc["rows"]
    assert {r["op"] for r in rows} == {"bibw"}
    assert {(r["src"], r["dst"]) for r in rows} == {(1, 2)}
    for r in rows:
        assert abs(r["gbps"] - 2 * r["bytes"] / (r["us"] * 1e3)) < 1e-6 * r["gbps"] + 1e-9
        # --quick times 5 repetitions; short rows take more (up to 10x) until they span 5 ms
        assert 5 <= r["reps"] <= 50
        if r["us"] * 5 >= 10000:
            assert r["reps"] == 5, r
    short = [r for r in rows if r["bytes"] == 1 << 20]
    assert all(r["reps"] > 5 for r in short if r["us"] * 5 < 1000), short


def test_bad_pairs_fail_clearly(cli, tmp_path):
    p = cli("bench", "p2p", "--quick", "--pairs", "0-9", "--out", str(tmp_path), check=False)
    assert p.returncode != 0 and "pair 0->9" in p.stderr


def test_torch_bench_names_the_calibrated_side_of_each_row():
    """bench torch's calibrated rows say which side served them: the backend's choice for the
    op's torch name, element type and size class (the op's largest buffer within a power of
    two), none where the calibration chose nothing for that class."""
    from gpustripe.benchmarks import torch_dist

    trace = {"choices": {"all_reduce float32 <2097152B": {"use": "nccl"},
                         "all_gather_into_tensor float32 <33554432B": {"use": "gpustripe"}}}
    assert torch_dist._chosen(trace, "allreduce", "float32", 1 << 20) == "nccl"
    assert torch_dist._chosen(trace, "allgather", "float32", 16 << 20) == "gpustripe"
    assert torch_dist._chosen(trace, "allreduce", "float32", 2 << 20) is None  # the next class
    assert torch_dist._chosen(trace, "allreduce", "bfloat16", 1 << 20) is None
    assert torch_dist._chosen({}, "bcast", "float32", 1 << 20) is None


def test_torch_bench_traces_only_the_rows_own_choice(capsys):
    """--trace prints, under a row, the calibration's choice for that row's kind alone (not every
    kind decided so far, which repeated each choice under every later row)."""
    from gpustripe.benchmarks import torch_dist

    choice = {"use": "gpustripe", "gpustripe": 20.0, "nccl": 30.0}
    trace = {"host_us": {}, "team": {},
             "choices": {"all_reduce float32 <2097152B": dict(choice), "all_reduce float32 <4194304B": dict(choice)}}
    torch_dist._print_trace(trace, torch_dist._kind_key("allreduce", "float32", 2 << 20))
    out = capsys.readouterr().out
    assert "<4194304B" in out and "<2097152B" not in out, out
    torch_dist._print_trace(trace)
    out = capsys.readouterr().out
    assert "<4194304B" in out and "<2097152B" in out, out


def test_torch_bench_prints_each_calibration_batch():
    """A calibrated kind's line gives the medians it was decided by and this rank's batches in
    order, so a side slow in its first batches shows apart from one slow throughout."""
    from gpustripe.benchmarks import torch_dist

    line = torch_dist._choice_line("all_to_all_single float32 <2097152B",
                                   {"use": "gpustripe", "gpustripe": 125.4, "nccl": 177.9,
                                    "paces": {"gpustripe": [130.0, 125.4], "nccl": [900.5, 36.0]}})
    assert line.startswith("chose gpustripe for all_to_all_single float32 <2097152B: gpustripe 125.4 us, "
                           "nccl 177.9 us"), line
    assert line.endswith("this rank's batches, in order: gpustripe 130.0 125.4; nccl 900.5 36.0"), line
    assert "batches, in order" not in torch_dist._choice_line("k", {"use": "nccl", "gpustripe": 2.0, "nccl": 1.0})


def test_torch_bench_profile_names_where_the_calls_time_went():
    """--profile's report: the functions a batch of calls spent its time in, the call's own among them."""
    from gpustripe.benchmarks import torch_dist

    def a_collective_stand_in():
        return sum(range(2000))

    report = torch_dist._profiled(a_collective_stand_in, 50)
    assert "a_collective_stand_in" in report and "50" in report, report


def test_torch_bench_trace_tells_a_few_long_calls_from_every_call_slow():
    """bench torch --trace: each method's timed calls, one by one, tell a pace set by a few long
    calls (mean far above the median, calls past 4x it) from one every call sets, with the
    garbage collector's share per call."""
    from gpustripe.benchmarks import torch_dist

    few = torch_dist._spread_line([10.0] * 18 + [1000.0, 1200.0], gc_us=400.0)
    assert "timed calls: 20, median 10.0 us, mean 119.0" in few
    assert "longest 1200.0, 2 over 4x the median" in few
    assert "garbage collection 20.0 us per call" in few
    every = torch_dist._spread_line([100.0, 110.0, 120.0, 130.0], gc_us=0.0)
    assert "median 115.0 us, mean 115.0" in every and "0 over 4x the median" in every
    assert torch_dist._spread_line([], 0.0) == "no timed calls"


def test_torch_bench_batches_last_long_enough_and_take_turns():
    """bench torch: a batch has at least --iters calls, and enough to last MIN_BATCH_US at the
    slowest method's warm-up pace (a few 1 MB calls would be mostly the batch's synchronisation);
    the methods' batches take turns, each going first in turn."""
    from gpustripe.benchmarks import torch_dist

    least = 10
    assert torch_dist.calls_per_batch([40.0, 35.0, 45.0], least, min_batch_us=2000.0) == 45  # 2 ms at 45 us
    assert torch_dist.calls_per_batch([5000.0, 4000.0], least, min_batch_us=2000.0) == least
    assert torch_dist.calls_per_batch([0.0], least) == least
    methods = ["a", "b", "c"]
    assert [torch_dist.turns(methods, k)[0] for k in range(3)] == methods
    assert torch_dist.turns(methods, 4) == ["b", "c", "a"]
    for k in range(6):
        assert sorted(torch_dist.turns(methods, k)) == methods


def test_torch_bench_short_batches_get_more_trials():
    """bench torch: each method gets at least --trials batches, and enough to last MIN_TIMED_US in
    all at the slowest pace (short host-bound calls' batches move by several percent each)."""
    from gpustripe.benchmarks import torch_dist

    assert torch_dist.trials_for(45, [40.0, 45.0], 5, min_timed_us=60000.0) == 30  # 2.0 ms a batch
    assert torch_dist.trials_for(10, [3000.0, 2500.0], 5, min_timed_us=60000.0) == 5  # 30 ms a batch
    assert torch_dist.trials_for(10, [0.0], 5) == 5
    assert torch_dist.trials_for(10, [100.0], 40, min_timed_us=60000.0) == 60
