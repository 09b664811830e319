"""gpustripe bench p2p: one-way copies between GPU pairs, gpustripe vs cudaMemcpyPeerAsync vs NCCL."""
from ._p2p_common import add_common_arguments, run_benchmark

NAME = "p2p"
HELP = ("one-way GPU-to-GPU bandwidth (4K-1G) and small-message latency (8B-64K): gpustripe, "
        "cudaMemcpyPeerAsync and NCCL send/recv, measured in one run")
DEFAULT_SIZES = "4K:1G"


def add_arguments(p):
    add_common_arguments(p, DEFAULT_SIZES, latency=True)
    p.set_defaults(default_sizes=DEFAULT_SIZES)


def run(args):
    return run_benchmark(args, "p2p", bidirectional=False)
