"""Cross-process collectives for processes that meet through a key-value store (no MPI).

`node_team(store, rank, size)` makes a `gpustripe._core.NodeTeam`: the members exchange
what setting up the team needs (the node channel's and the team's shared-memory names)
through `store`, any object with `set(key, bytes)` and a blocking `get(key) -> bytes`
(torch.distributed's stores; a file store in the tests). Every member calls it at the
same point. The PyTorch backend (gpustripe.torch) is built on it.
"""
from __future__ import annotations

from ._core import NodeTeam


class StoreAllgather:
    """allgather(bytes) -> bytes (every member's message in rank order) over a store.

    Each call uses keys of its own (prefix/seq/rank), so calls never read an earlier
    call's messages; the setup makes only a few."""

    def __init__(self, store, rank: int, size: int, prefix: str = "gpustripe/team"):
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} of {size} members")
        self.store, self.rank, self.size, self.prefix = store, rank, size, prefix
        self._seq = 0

    def __call__(self, data: bytes) -> bytes:
        seq = self._seq
        self._seq += 1
        self.store.set(f"{self.prefix}/{seq}/{self.rank}", bytes(data))
        parts = [bytes(self.store.get(f"{self.prefix}/{seq}/{r}")) for r in range(self.size)]
        if any(len(p) != len(data) for p in parts):
            raise RuntimeError(f"{self.prefix}: members sent messages of different sizes: {[len(p) for p in parts]}")
        return b"".join(parts)


def node_team(store, rank: int, size: int, prefix: str = "gpustripe/team") -> NodeTeam:
    """The collective team of `size` processes of this node (one GPU each), met through `store`."""
    return NodeTeam(rank, size, StoreAllgather(store, rank, size, prefix))
