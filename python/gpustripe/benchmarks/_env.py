"""Settings changed for one benchmark variant: the library reads GPUSTRIPE_* variables at
every call, so a variant sets them around its run and the caller's values come back after."""
from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def scoped_env(env: dict):
    """Sets `env` in os.environ for the with-block, then restores (or removes) each variable."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
