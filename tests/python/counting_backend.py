"""A process-group backend stand-in that counts its calls by name and passes them on: the torch
backend's scripts (torch_backend_cpu.py, torch_backend_ops.py) put it in place of the backend a
call is handed to, to check how many calls reach it."""
import collections


class Counting:
    def __init__(self, backend):
        self.backend, self.calls = backend, collections.Counter()

    def __getattr__(self, name):
        f = getattr(self.backend, name)

        def call(*args, **kwargs):
            self.calls[name] += 1
            return f(*args, **kwargs)
        return call
