"""docs/settings.md is the settings registry's own table (`gpustripe config --markdown`), so the
reference page of the GPUSTRIPE_* variables holds every setting the libraries declare, and no
other, with the code's types and defaults."""
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("GPUSTRIPE_BUILD_DIR", "build/dev"))
INTERPOSER = os.path.join(BUILD, "src", "mpi", "libgpustripe_mpi.so")
DOC = os.path.join(ROOT, "docs", "settings.md")


def generated(cli):
    return cli("config", "--markdown", "--interposer", INTERPOSER).stdout


@pytest.mark.skipif(not os.path.exists(INTERPOSER), reason="no MPI interposer built (no MPI found)")
def test_the_reference_page_is_the_registry(cli):
    with open(DOC) as f:
        page = f.read()
    assert page == generated(cli), (
        "docs/settings.md differs from the settings the code declares: regenerate it with "
        f"gpustripe config --markdown --interposer {INTERPOSER} > docs/settings.md")


@pytest.mark.skipif(not os.path.exists(INTERPOSER), reason="no MPI interposer built (no MPI found)")
def test_the_page_lists_every_declared_setting_once(cli):
    import gpustripe

    table = [line for line in generated(cli).splitlines() if line.startswith("| `GPUSTRIPE_")]
    names = [line.split("`")[1] for line in table]
    assert len(names) == len(set(names))
    assert set(s["name"] for s in gpustripe.settings()) <= set(names)  # the core library's own
    assert "GPUSTRIPE_MPI" in names  # declared by the interposer alone: loaded by --interposer


def test_a_missing_interposer_is_a_clear_error(cli, tmp_path):
    p = cli("config", "--markdown", "--interposer", str(tmp_path / "none.so"), check=False)
    assert p.returncode != 0 and "no file" in p.stderr and "Traceback" not in p.stderr
