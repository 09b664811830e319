"""A key-value store over a directory, standing in for torch.distributed's stores in tests
without torch: set(key, bytes) publishes a file atomically, get(key) waits for it (bounded)."""
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

    def get(self, key: str) -> bytes:
        f = self._file(key)
        end = time.monotonic() + self.timeout
        while not os.path.exists(f):
            if time.monotonic() > end:
                raise TimeoutError(f"file store {self.path}: no key {key!r} after {self.timeout} s")
            time.sleep(0.002)
        with open(f, "rb") as inp:
            return inp.read()
