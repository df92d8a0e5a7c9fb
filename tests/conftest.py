import os

# Triton kernels run on the CPU through the interpreter in CI (no GPU there); set before triton is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Several test processes (pytest-xdist) share the cores: each, and each notebook kernel it starts, computes on one
# thread (set before torch is imported), so that two processes on two cores do not fight over four threads.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


import pytest  # noqa: E402


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one intra-op thread is fastest, and avoids OpenMP spinning when the CPU is shared."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class ExecutedBook:
    """The chapter notebooks executed in one profile, each at most once per test session, with one fresh RunStore
    for every profile and one figure folder per profile. In the smoke profile (CI's code path, which trains) for
    tests/test_notebooks.py; in the reference profile (what `make book` renders: the stored reference runs replayed,
    nothing trained) for tests/test_site.py, which renders and browses it."""

    def __init__(self, root, profile: str = "smoke"):
        self.root, self.profile, self.executed = root, profile, {}

    def execute(self, notebook):
        from rlbook.book import execute

        if notebook.name not in self.executed:
            env = {"RLBOOK_RUNS": str(self.root / "notebook-runs"), "RLBOOK_FIGURES": str(self.figures)}
            with pytest.MonkeyPatch.context() as patch:  # the kernel inherits this environment
                for key, value in env.items():
                    patch.setenv(key, value)
                out = self.root / f"executed-{self.profile}" / notebook.name
                execute(notebook, out, self.profile)
            self.executed[notebook.name] = out
        return self.executed[notebook.name]

    @property
    def figures(self):
        return self.root / f"figures-{self.profile}"


@pytest.fixture(scope="session")
def book_root(tmp_path_factory):
    return tmp_path_factory.mktemp("book")


@pytest.fixture(scope="session")
def smoke_book(book_root):
    return ExecutedBook(book_root, "smoke")


@pytest.fixture(scope="session")
def reference_book(book_root):
    return ExecutedBook(book_root, "reference")
