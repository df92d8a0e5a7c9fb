import os

# Triton kernels run on the CPU through the interpreter in CI (no GPU there); set before triton is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


import pytest  # noqa: E402


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one intra-op thread is fastest, and avoids OpenMP spinning when the CPU is shared."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
