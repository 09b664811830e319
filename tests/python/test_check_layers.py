"""scripts/check-layers.py: passes on the tree, fails on an include that climbs."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "check-layers.py")


def run(root):
    return subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True, timeout=60)


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_the_tree_has_no_climbing_include():
    r = run(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_climbing_include_fails(tmp_path):
    write(tmp_path, "src/engine/engine.hpp", '#include "model/plan.hpp"\n')
    write(tmp_path, "src/model/plan.hpp", '#include "common/error.hpp"\n#include "plan_spec.hpp"\n')
    assert run(str(tmp_path)).returncode == 0  # downward and same-folder includes pass
    write(tmp_path, "src/model/calibrate.cpp", '#include "engine/engine.hpp"\n')
    r = run(str(tmp_path))
    assert r.returncode == 1
    assert "src/model/calibrate.cpp" in r.stdout and "engine/engine.hpp" in r.stdout


def test_a_backend_implementation_is_private(tmp_path):
    write(tmp_path, "src/backend/cuda/cuda_backend.cpp", '#include "backend/cuda/driver_api.hpp"\n')
    assert run(str(tmp_path)).returncode == 0  # inside the backend: allowed
    write(tmp_path, "src/coll/barrier_cuda.cu", '#include "backend/cuda/driver_api.hpp"\n')
    r = run(str(tmp_path))
    assert r.returncode == 1 and "src/coll/barrier_cuda.cu" in r.stdout


def test_a_folder_in_no_layer_fails(tmp_path):
    write(tmp_path, "src/newlayer/x.cpp", "int x;\n")
    r = run(str(tmp_path))
    assert r.returncode == 1 and "newlayer" in r.stdout
