"""The store-met team's tests (test_node_team.py, test_node_team_queue.py): a worker script run as
one process per rank, meeting through a file store, each printing its report as a tagged JSON line."""
import json
import subprocess
import sys

import pytest


def skip_without(size: int) -> None:
    """Skips where the GPUs are fewer than the ranks (none: the emulated node serves any count)."""
    import gpustripe

    if 0 < gpustripe.cuda_device_count() < size:
        pytest.skip(f"needs {size} GPUs")


def run_ranks(worker: str, store: str, size: int, args: list, env: dict, timeout: float) -> list[str]:
    """Each rank's output (`worker store rank size *args`), every rank having exited with 0 within
    `timeout` seconds (the processes left are killed)."""
    procs = [subprocess.Popen([sys.executable, worker, store, str(r), str(size), *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)
             for r in range(size)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
    return outs


def reports(out: str, tag: str) -> list[dict]:
    """The JSON reports of one rank's output: its lines that start with `tag`."""
    return [json.loads(ln[len(tag):]) for ln in out.splitlines() if ln.startswith(tag)]
