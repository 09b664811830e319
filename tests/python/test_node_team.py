"""The cross-process collective team driven by a key-value store instead of MPI (what the
PyTorch backend runs on): 2 and 3 processes, every collective checked against numpy, on the
emulated node here (on GPUs where there are enough). Needs no torch and no MPI."""
import os
import subprocess
import sys

import pytest
from store_ranks import reports, run_ranks, skip_without

WORKER = os.path.join(os.path.dirname(__file__), "node_team_worker.py")


def run_team(tmp_path, size: int, timeout: int = 120, mode: str = "host", shared: bool = False,
             **extra_env) -> list[dict]:
    env = dict(os.environ, GPUSTRIPE_TIMEOUT=os.environ.get("GPUSTRIPE_TIMEOUT", "30"), PYTHONUNBUFFERED="1",
               **extra_env)
    out = []
    args = [mode] + (["shared"] if shared else [])
    for text in run_ranks(WORKER, str(tmp_path / "store"), size, args, env, timeout):
        got = reports(text, "NODETEAM ")
        assert len(got) == 1, text
        out.append(got[0])
    return out


@pytest.mark.parametrize("mode,staging", [("host", ""), ("ordered", "on"), ("ordered", "mixed"), ("ordered", "off")])
@pytest.mark.parametrize("size", [2, 3])
def test_store_team_runs_every_collective(tmp_path, size, mode, staging):
    """host: each call returns when done; ordered: each is enqueued behind a stream, the
    allreduce, reduce-scatter, allgather and alltoall calls staged through the team's slots (no exchange)
    unless staging is off (coll.staged_max=0); mixed: slots too small for the larger calls, which
    meet the other ranks between staged ones."""
    skip_without(size)
    staged = staging in ("on", "mixed")
    env = {"off": {"GPUSTRIPE_TEST": "coll.staged_max=0"},
           "mixed": {"GPUSTRIPE_TEST": "coll.staged_max=16K"}}.get(staging, {})
    reports = run_team(tmp_path, size, mode=mode, **env)
    assert sorted(r["rank"] for r in reports) == list(range(size))
    check_every_collective(reports, staged)


def check_every_collective(reports: list[dict], staged: bool) -> None:
    """Every check right; every call ran on gpustripe's schedules but the host buffers' (an
    allreduce's and an alltoall's) where they are not staged, and the uneven all-to-alls whose
    sizes differ."""
    for r in reports:
        bad = [c for c in r["checks"] if not c["ok"]]
        assert not bad, (r["rank"], bad[:5])
        assert len(r["checks"]) > 100
        declined = sum(c.get("declined", False) for c in r["checks"])
        assert declined == 2
        assert sum(c["served"] for c in r["checks"]) == len(r["checks"]) - (0 if staged else 2) - declined


@pytest.mark.parametrize("mode", ["host", "ordered"])
def test_two_ranks_sharing_one_gpu_run_every_collective(tmp_path, mode):
    """Both ranks' buffers on device 0 (two processes of one GPU, as where a job runs more ranks
    than the node has GPUs): every call right, staged ones included (their slots, GPU barriers and
    the streams' meeting before each run all on the one GPU)."""
    check_every_collective(run_team(tmp_path, 2, mode=mode, shared=True), staged=mode == "ordered")


@pytest.mark.parametrize("size", [2, 3])
def test_store_team_bcast_through_shared_host_staging(tmp_path, size):
    """A 30% host share at every size, in 4K chunks: the broadcasts are right from every root, and
    the shared host staging lives and dies with its team (made and closed twice per process)."""
    skip_without(size)
    reports = run_team(tmp_path, size, mode="bcast_host",
                       GPUSTRIPE_TEST="coll.bcast_host_share=0.3,coll.bcast_chunk=4K")
    for r in reports:
        bad = [c for c in r["checks"] if not c["ok"]]
        assert not bad, (r["rank"], bad[:5])
        assert len(r["checks"]) == 2 * (3 * size * 2 + 2)


def test_store_team_setup_without_a_member_ends_at_the_timeout(tmp_path):
    # Member 1 never comes: member 0's wait for it ends after GPUSTRIPE_TIMEOUT (the store's
    # own get would wait its 60 s), with an error naming the setting.
    env = dict(os.environ, GPUSTRIPE_TIMEOUT="1", PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, WORKER, str(tmp_path / "store"), "0", "2"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env)
    try:
        out = p.communicate(timeout=30)[0]
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0, out
    assert "GPUSTRIPE_TIMEOUT" in out and "NODETEAM" not in out, out
