"""A process-group backend stand-in that counts its calls by name and passes them on: the torch
backend's scripts (torch_backend_cpu.py, torch_backend_ops.py) put it in place of the backend a
call is handed to, to check how many calls reach it. With `delay`, each call first waits that
many seconds: a backend whose host time per call is known (the calibration's tests)."""
import collections
import time


class Counting:
    def __init__(self, backend, delay: float = 0.0):
        self.backend, self.delay, self.calls = backend, delay, collections.Counter()

    def __getattr__(self, name):
        f = getattr(self.backend, name)

        def call(*args, **kwargs):
            self.calls[name] += 1
            if self.delay:
                time.sleep(self.delay)
            return f(*args, **kwargs)
        return call
