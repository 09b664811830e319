"""The command line as a newcomer meets it: --version, output piped into a reader that stops
early, clear errors for a missing output folder, results that say what made them, the
README's example on any machine, and bench coll's --sizes."""
import json
import os
import re
import subprocess
import sys

import pytest

import gpustripe
from gpustripe import cli as gs_cli
from gpustripe import results

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_version_names_the_version_and_the_commit(cli):
    out = cli("--version").stdout
    assert out.startswith(f"gpustripe {gpustripe.__version__} (commit ")
    if os.path.exists(os.path.join(ROOT, ".git")):  # a checkout (.git is a file in a worktree)
        assert "(commit unknown)" not in out


@pytest.mark.parametrize("args", [["config"], ["plan", "--topology", "h200x4"],
                                  ["simulate", "--topology", "h200x4", "--no-plot"]])
def test_output_piped_into_a_reader_that_stops_ends_quietly(args):
    """`gpustripe config | head`: the reader closes the pipe before the command writes."""
    p = subprocess.Popen([sys.executable, "-m", "gpustripe.cli", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # before the interpreter has even started: every write meets a closed pipe
    err = p.stderr.read()
    rc = p.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert rc == 0, err


def test_topo_draw_into_a_missing_folder_is_a_clear_error(cli, tmp_path):
    p = cli("topo", "--topology", "h200x4", "--draw", str(tmp_path / "no" / "such" / "node.png"), check=False)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "does not exist" in p.stderr


def test_results_record_the_version_and_the_commit(tmp_path):
    row = {"op": "p2p", "method": "gpustripe", "bytes": 1 << 20, "gbps": 1.0, "us": 1048.6}
    doc = json.load(open(results.write("p2p", "emulated-test", 2, [row], out_dir=str(tmp_path), plot=False)))
    assert doc["version"] == gpustripe.__version__
    assert doc["commit"]
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # in a checkout: its commit, as `git describe` names it
        assert head.stdout.strip()[:7] in doc["commit"]


def test_bench_coll_quick_honours_sizes():
    from gpustripe.benchmarks import coll

    parser = gs_cli.build_parser()
    args = parser.parse_args(["bench", "coll", "--quick", "--sizes", "4K,64K"])
    assert coll._sizes(args) == [4 << 10, 64 << 10]
    assert coll._sizes(parser.parse_args(["bench", "coll", "--quick"])) == [1 << 20, 16 << 20, 64 << 20, 256 << 20]
    assert coll._sizes(parser.parse_args(["bench", "coll"]))[0] == 1 << 20


def readme_example():
    """The README's Python example that runs anywhere (the one making a gpustripe.Context)."""
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    anywhere = [b for b in blocks if "gpustripe.Context()" in b]
    assert len(anywhere) == 1, "the README has one Python example on gpustripe.Context()"
    return anywhere[0]


def test_readme_example_runs_on_any_machine():
    p = subprocess.run([sys.executable, "-c", readme_example()], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "direct" in p.stdout  # it prints the planner's split


def test_rounds_take_turns_and_the_median_round_is_kept():
    from gpustripe import results

    assert results.in_turns(["a", "b", "c"], 3) == [(0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a"),
                                                   (2, "a"), (2, "b"), (2, "c")]
    row = lambda us, m="a": {"method": m, "op": "p2p", "bytes": 8, "us": us}  # noqa: E731
    kept = results.median_rounds([[row(3.0), row(9.0, "b")], [row(1.0), row(7.0, "b")], [row(2.0), row(8.0, "b")]],
                                 ("method", "op", "bytes"), "us")
    assert sorted((r["method"], r["us"], tuple(r["rounds_us"])) for r in kept) == [
        ("a", 2.0, (3.0, 1.0, 2.0)), ("b", 8.0, (9.0, 7.0, 8.0))]
    # an even count keeps the upper middle; one round is returned as it is
    assert results.median_rounds([[row(1.0)], [row(4.0)]], ("method",), "us")[0]["us"] == 4.0
    assert results.median_rounds([[row(5.0)]], ("method",), "us") == [row(5.0)]
    # rounds a stopped run never reached are left out
    assert results.median_rounds([[row(5.0)], [], []], ("method",), "us") == [row(5.0)]
    assert results.median_rounds([[], []], ("method",), "us") == []
