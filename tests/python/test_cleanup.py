"""Shared memory left by killed gpustripe processes (common/shm_reclaim.hpp): listed and removed
by `gpustripe cleanup` (the next job does it by itself: test_backend_emulated's
SegmentsOfDeadProcessesAreRemoved), only this user's, only of processes that died. In a
directory of the test's own: any gpustripe process starting on the machine reclaims
/dev/shm."""
import json
import os
import subprocess
import sys

import pytest

import gpustripe


def _dead_pid():
    """A pid that existed and no longer does (a child that ran and was reaped)."""
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                       check=True)
    return int(p.stdout)


@pytest.fixture
def segments(tmp_path):
    dead = _dead_pid()

    def make(name, size=4096):
        path = tmp_path / name
        path.write_bytes(b"\0" * size)
        return str(path)

    made = {
        "dead_emulated": make(f"gpustripe.{dead}.7", 8192),
        "dead_team": make(f"gpustripe-coll-{dead}-00ab12cd34ef5678"),
        "live": make(f"gpustripe.{os.getpid()}.9"),
        "not_ours": make(f"gpustripe-{dead}"),  # not a gpustripe segment name
        "other_program": make(f"other.{dead}.1"),
    }
    if os.geteuid() == 0:
        made["other_user"] = make(f"gpustripe-job-{dead}-0123456789abcdef")
        os.chown(made["other_user"], 65534, 65534)
    return tmp_path, made


def _name(path):
    return "/" + os.path.basename(path)


KEPT = ("live", "not_ours", "other_program", "other_user")


def test_dead_segments_lists_only_this_users_segments_of_dead_processes(segments):
    d, made = segments
    listed = {r["name"]: r for r in gpustripe.dead_segments(str(d))}
    assert set(listed) == {_name(made["dead_emulated"]), _name(made["dead_team"])}
    assert listed[_name(made["dead_emulated"])]["bytes"] == 8192
    for path in made.values():
        assert os.path.exists(path)  # listing removes nothing


def test_cleanup_command_removes_them_and_keeps_the_rest(segments, cli):
    d, made = segments
    dry = json.loads(cli("cleanup", "--dry-run", "--json", "--shm-dir", str(d)).stdout)
    assert not dry["removed"] and len(dry["segments"]) == 2
    assert os.path.exists(made["dead_emulated"])
    out = cli("cleanup", "--shm-dir", str(d)).stdout
    assert os.path.basename(made["dead_team"]) in out and "removed 2 segments" in out
    assert not os.path.exists(made["dead_emulated"])
    assert not os.path.exists(made["dead_team"])
    for keep in KEPT:
        if keep in made:
            assert os.path.exists(made[keep]), keep
