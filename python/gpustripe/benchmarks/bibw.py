"""gpustripe bench bibw: both directions of each pair at once, aggregate bandwidth."""
from ._p2p_common import add_common_arguments, run_benchmark

NAME = "bibw"
HELP = ("bidirectional bandwidth: SRC->DST and DST->SRC at once (aggregate GB/s), gpustripe "
        "(planned together) vs cudaMemcpyPeerAsync vs NCCL")
DEFAULT_SIZES = "4K:1G"


def add_arguments(p):
    add_common_arguments(p, DEFAULT_SIZES, latency=False)
    p.set_defaults(default_sizes=DEFAULT_SIZES)


def run(args):
    return run_benchmark(args, "bibw", bidirectional=True)
