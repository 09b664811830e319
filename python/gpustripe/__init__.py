"""gpustripe: multi-path GPU-to-GPU transfers within one node.

The C++ core (libgpustripe) does the work; this package binds it and adds the
``gpustripe`` command line and plots. Errors from the core raise
:class:`gpustripe.Error`, whose ``status`` attribute names the C status code.
"""
from . import _core
from ._core import *  # noqa: F401,F403  (the bound API: Error, settings, Topology, ...)
from .copy import copy_, default_context  # noqa: F401  (array interfaces and streams are Python's)

__version__ = ".".join(str(v) for v in _core.VERSION)
