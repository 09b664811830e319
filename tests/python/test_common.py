import gpustripe
import pytest


def test_settings_list_every_variable_with_description():
    rows = gpustripe.settings()
    names = [r["name"] for r in rows]
    assert "GPUSTRIPE_LOG_LEVEL" in names
    assert names == sorted(names)
    for r in rows:
        assert r["name"].startswith("GPUSTRIPE_") and r["description"]


def test_parse_size_errors_raise_gpustripe_error():
    assert gpustripe.parse_size("256M") == 256 << 20
    with pytest.raises(gpustripe.Error) as e:
        gpustripe.parse_size("12Q")
    assert e.value.status == "GPUSTRIPE_ERR_CONFIG"
    assert "suffix" in str(e.value)


def test_config_command_prints_current_values(cli):
    out = cli("config", env={"GPUSTRIPE_LOG_LEVEL": "debug"}).stdout
    assert "* GPUSTRIPE_LOG_LEVEL=debug" in out
