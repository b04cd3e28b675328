# A stand-in for torch with CUDA, for preflight/gpu_loopback_test.cc: just
# what preflight/gpu_loopback.py calls, so that its GPU half (the copies, the
# NCCL workers, the JSON) runs on a machine without a GPU.
#   FAKE_TORCH_GPUS: how many GPUs (default 4)
#   FAKE_TORCH_SLOW_GPU: the index of a GPU whose copies take 4x as long
#   FAKE_TORCH_FAIL_RANK: an all-reduce rank that exits 1
import os

__version__ = "0.0-fake"
uint8 = "uint8"
float32 = "float32"
_device = [0]


class Tensor:
    def __init__(self, n):
        self.n = n

    def copy_(self, other):
        return self

    def numel(self):
        return self.n


def empty(n, dtype=None, device=None):
    return Tensor(n)


def ones(n, dtype=None, device=None):
    return Tensor(n)


def empty_like(t):
    return Tensor(t.n)


class cuda:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def device_count():
        return int(os.environ.get("FAKE_TORCH_GPUS", "4"))

    @staticmethod
    def get_device_name(i):
        return "Fake GPU"

    @staticmethod
    def set_device(i):
        _device[0] = i

    @staticmethod
    def synchronize():
        pass

    @staticmethod
    def empty_cache():
        pass

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            pass

        def elapsed_time(self, end):
            slow = os.environ.get("FAKE_TORCH_SLOW_GPU")
            return 400.0 if slow is not None and int(slow) == _device[0] else 100.0


from . import distributed  # noqa: E402
