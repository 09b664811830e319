"""gpustripe.Topology and `gpustripe topo`: every shipped file, --json, --draw, errors."""
import json

import pytest

import gpustripe

SHIPPED = ["beluga-v100x4", "h200x4", "h200x8", "mist-ac922", "narval-a100x4"]


def test_shipped_topologies_are_listed():
    names = gpustripe.shipped_topologies()
    for n in SHIPPED:
        assert n in names
    assert gpustripe.DEFAULT_TOPOLOGY == "h200x4"


def test_topology_properties():
    t = gpustripe.load_topology("mist-ac922")
    assert t.gpu_count == 4 and len(t.gpus) == 4
    g = t.gpu(2)
    assert g.name == "Tesla V100-SXM2-32GB" and g.compute_capability == (7, 0)
    assert g.host_link == "nvlink" and g.host_nvlinks == 3 and g.socket == 1
    assert t.direct_gbps(0, 1) == pytest.approx(75)
    assert t.direct_gbps(1, 2) == pytest.approx(64)
    assert t.nvlinks_between(1, 2) == 0
    assert [s.numa_node for s in t.sockets] == [0, 8]
    assert t.socket_links[0].kind == "xbus"
    assert t.peer_access[0] == [False, True, True, True]
    assert t.sources and "HOTI" in t.sources[0]
    h = gpustripe.load_topology("h200x4")
    assert h.has_nvswitch() and h.gpus[0].nvlinks == 18
    assert h.direct_gbps(3, 0) == pytest.approx(18 * 26.6)
    assert gpustripe.pcie_gbps(5, 16) == pytest.approx(63.0, abs=0.05)


def test_bad_device_raises_with_the_range():
    t = gpustripe.load_topology("h200x4")
    with pytest.raises(gpustripe.Error) as e:
        t.direct_gbps(0, 9)
    assert e.value.status == "GPUSTRIPE_ERR_INVALID_DEVICE"
    assert "0-3" in str(e.value)


def test_round_trip_through_text():
    for n in SHIPPED:
        t = gpustripe.load_topology(n)
        back = gpustripe.load_topology_text(t.to_json(), "x")
        assert back.to_json() == t.to_json()
        assert back.fingerprint() == t.fingerprint()


@pytest.mark.parametrize("name", SHIPPED)
def test_cli_topo_shows_each_file(cli, name):
    p = cli("topo", "--topology", name)
    t = gpustripe.load_topology(name)
    assert t.name in p.stdout
    assert f"{t.gpu_count} GPU(s)" in p.stdout
    assert "Direct peer copy GB/s" in p.stdout
    assert "no GPU visible" not in p.stdout  # a named file is not the default


@pytest.mark.parametrize("name", SHIPPED)
def test_cli_topo_json_is_the_file(cli, name):
    p = cli("topo", "--topology", name, "--json")
    doc = json.loads(p.stdout)
    assert doc["schema"] == 1
    assert len(doc["gpus"]) == gpustripe.load_topology(name).gpu_count
    assert p.stdout == gpustripe.load_topology(name).to_json()


def test_cli_topo_json_file_path(cli, tmp_path):
    f = tmp_path / "mine.json"
    f.write_text(gpustripe.load_topology("narval-a100x4").to_json())
    p = cli("topo", "--topology", str(f))
    assert "Narval" in p.stdout and str(f) in p.stdout


@pytest.mark.parametrize("suffix,magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_cli_topo_draw(cli, tmp_path, suffix, magic):
    for name in ("h200x8", "mist-ac922"):
        out = tmp_path / f"{name}{suffix}"
        cli("topo", "--topology", name, "--draw", str(out))
        data = out.read_bytes()
        assert len(data) > 10_000, f"{out} is suspiciously small"
        assert data.startswith(magic)


def test_cli_topo_draw_needs_png_or_svg(cli, tmp_path):
    p = cli("topo", "--topology", "h200x4", "--draw", str(tmp_path / "x.jpg"), check=False)
    assert p.returncode == 2 and ".png or .svg" in p.stderr


def test_cli_topo_malformed_file_names_field_and_line(cli, tmp_path):
    text = gpustripe.load_topology("narval-a100x4").to_json()
    lines = text.splitlines()
    # Break the third GPU's link count: find its "links" line after the third "nvlink".
    starts = [i for i, l in enumerate(lines) if l.strip().startswith('"nvlink": {')]
    target = next(i for i in range(starts[2], len(lines)) if '"links":' in lines[i])
    lines[target] = lines[target].replace('"links": 12', '"links": "four"')
    f = tmp_path / "narval.json"
    f.write_text("\n".join(lines) + "\n")
    p = cli("topo", "--topology", str(f), check=False)
    assert p.returncode == 1
    assert f'{f}:{target + 1}: gpus[2].nvlink.links: expected an integer, got "four"' in p.stderr, p.stderr


def test_cli_topo_unknown_name_lists_shipped(cli):
    p = cli("topo", "--topology", "no-such-node", check=False)
    assert p.returncode == 1
    assert "h200x4" in p.stderr and "no-such-node" in p.stderr


def test_cli_topo_without_gpu_shows_default(cli):
    if gpustripe.cuda_device_count() if hasattr(gpustripe, "cuda_device_count") else 0:
        pytest.skip("a GPU is visible: topo shows the detected node")
    p = cli("topo", env={"GPUSTRIPE_TOPOLOGY": ""})
    assert p.stdout.startswith(
        "no GPU visible: showing the default emulated node h200x4 (set GPUSTRIPE_TOPOLOGY)")
    assert "4x H200" in p.stdout
    p = cli("topo", "--json", env={"GPUSTRIPE_TOPOLOGY": ""})
    assert json.loads(p.stdout)["name"].startswith("4x H200")
    assert "no GPU visible" in p.stderr


def test_cli_topo_follows_gpustripe_topology(cli):
    p = cli("topo", env={"GPUSTRIPE_TOPOLOGY": "beluga-v100x4"})
    assert "Beluga" in p.stdout and "GPUSTRIPE_TOPOLOGY=beluga-v100x4" in p.stdout


def test_detect_topology(requires_gpu):
    t = gpustripe.detect_topology()
    assert t.gpu_count == requires_gpu
    assert all(g.name for g in t.gpus)
    assert len(t.peer_access) == t.gpu_count and all(len(r) == t.gpu_count for r in t.peer_access)
    if "H200" in t.gpus[0].name:  # the NVLinks show where the H200 has peers (a lone one shows none)
        assert all(g.pcie_gen == 5 and g.pcie_width == 16 for g in t.gpus)
        assert t.gpu_count < 2 or all(g.nvlinks == 18 and g.nvswitch for g in t.gpus)
