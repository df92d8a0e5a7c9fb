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


class SmokeBook:
    """The chapter notebooks executed in the smoke profile, each at most once per test session, with one fresh
    RunStore and figure folder for all of them (as CI and `make book` run them): tests/test_notebooks.py checks each
    notebook, tests/test_site.py renders and browses the same executed notebooks."""

    def __init__(self, root):
        self.root, self.executed = root, {}

    def execute(self, notebook):
        from rlbook.book import execute

        if notebook.name not in self.executed:
            env = {"RLBOOK_RUNS": str(self.root / "notebook-runs"), "RLBOOK_FIGURES": str(self.root / "figures")}
            with pytest.MonkeyPatch.context() as patch:  # the kernel inherits this environment
                for key, value in env.items():
                    patch.setenv(key, value)
                out = self.root / "executed" / notebook.name
                execute(notebook, out, "smoke")
            self.executed[notebook.name] = out
        return self.executed[notebook.name]

    @property
    def figures(self):
        return self.root / "figures"


@pytest.fixture(scope="session")
def smoke_book(tmp_path_factory):
    return SmokeBook(tmp_path_factory.mktemp("smoke-book"))
