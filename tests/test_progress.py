"""Progress bars are off when the caller says so or when TQDM_DISABLE=1 (headless book execution)."""
from rlbook.progress import progress_bar


def test_progress_bar_switches(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    assert not progress_bar(range(3), True).disable
    assert progress_bar(range(3), False).disable
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert progress_bar(range(3), True).disable
