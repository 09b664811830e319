import os
import subprocess
import sys

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


def test_unknown_setting_name_warns_once():
    """A misspelled GPUSTRIPE_* name warns once per process, however many settings are read."""
    code = "import gpustripe\nfor _ in range(3): gpustripe.settings()\n"
    env = dict(os.environ, GPUSTRIPE_LOG_LEVL="debug")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("GPUSTRIPE_LOG_LEVL") == 1, r.stderr
    assert "not a gpustripe setting" in r.stderr
    env.pop("GPUSTRIPE_LOG_LEVL")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "not a gpustripe setting" not in r.stderr, r.stderr
