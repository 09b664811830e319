"""Cross-process collectives for processes that meet through a key-value store (no MPI).

`node_team(store, rank, size)` makes a `gpustripe._core.NodeTeam`: the members exchange
what setting up the team needs (the node channel's and the team's shared-memory names)
through `store`, any object with `set(key, bytes)`, a blocking `get(key) -> bytes` and
`wait(keys, timedelta)` (torch.distributed's stores; a file store in the tests): a wait for
the other members lasts at most GPUSTRIPE_TIMEOUT, as every other wait on a peer does. Every member calls it at the
same point. The PyTorch backend (gpustripe.torch) is built on it.
"""
from __future__ import annotations

from datetime import timedelta

from ._core import NodeTeam


class StoreAllgather:
    """allgather(bytes, timeout) -> bytes (every member's message in rank order) over a store,
    waiting at most `timeout` seconds for the others (0: as long as the store's get does).

    Each call uses keys of its own (prefix/seq/rank), so calls never read an earlier
    call's messages; the setup makes only a few."""

    def __init__(self, store, rank: int, size: int, prefix: str = "gpustripe/team"):
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} of {size} members")
        self.store, self.rank, self.size, self.prefix = store, rank, size, prefix
        self._seq = 0

    def __call__(self, data: bytes, timeout: float = 0.0) -> bytes:
        seq = self._seq
        self._seq += 1
        self.store.set(f"{self.prefix}/{seq}/{self.rank}", bytes(data))
        keys = [f"{self.prefix}/{seq}/{r}" for r in range(self.size)]
        if timeout > 0:
            try:
                self.store.wait(keys, timedelta(seconds=timeout))
            except Exception as e:  # torch's stores raise their own error type on a timeout
                raise TimeoutError(f"{self.prefix}: rank {self.rank} waited {timeout:g} s (GPUSTRIPE_TIMEOUT) for the "
                                   f"other members' message {seq}: {e}") from e
        parts = [bytes(self.store.get(k)) for k in keys]
        if any(len(p) != len(data) for p in parts):
            raise RuntimeError(f"{self.prefix}: members sent messages of different sizes: {[len(p) for p in parts]}")
        return b"".join(parts)


def node_team(store, rank: int, size: int, prefix: str = "gpustripe/team") -> NodeTeam:
    """The collective team of `size` processes of this node (one GPU each), met through `store`."""
    return NodeTeam(rank, size, StoreAllgather(store, rank, size, prefix))
