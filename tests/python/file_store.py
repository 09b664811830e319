"""A key-value store over a directory, standing in for torch.distributed's stores in tests
without torch: set(key, bytes) publishes a file atomically, get(key) waits for it (bounded),
wait(keys, timedelta) waits for all of them (bounded by its argument)."""
import datetime
import os
import time
import urllib.parse


class FileStore:
    def __init__(self, path: str, timeout: float = 60.0):
        self.path, self.timeout = path, timeout
        os.makedirs(path, exist_ok=True)

    def _file(self, key: str) -> str:
        return os.path.join(self.path, urllib.parse.quote(key, safe=""))

    def set(self, key: str, value: bytes) -> None:
        f = self._file(key)
        tmp = f"{f}.{os.getpid()}.tmp"
        with open(tmp, "wb") as out:
            out.write(value)
        os.replace(tmp, f)

    def wait(self, keys, timeout) -> None:
        limit = timeout.total_seconds()
        end = time.monotonic() + limit
        for key in keys:
            f = self._file(key)
            while not os.path.exists(f):
                if time.monotonic() > end:
                    raise TimeoutError(f"file store {self.path}: no key {key!r} after {limit} s")
                time.sleep(0.002)

    def get(self, key: str) -> bytes:
        self.wait([key], datetime.timedelta(seconds=self.timeout))
        f = self._file(key)
        with open(f, "rb") as inp:
            return inp.read()
