import os

# Triton kernels run on the CPU through the interpreter in CI (no GPU there); set before triton is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
