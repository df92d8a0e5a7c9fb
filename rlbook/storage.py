"""Files that are whole or absent: atomic writes, and JSON read back with errors naming file and line.

Files that are whole or absent: atomic writes, JSON objects and rows read back with errors naming file and line,
where results live (the RunStore's roots) and the record of where a result was made (environment).

Every file is written atomically (temporary file + rename) and metric rows are appended and fsynced, so a killed
process never leaves a corrupt file. Nothing is ever dropped silently: the one thing tolerated is a torn last row
(the process died writing it, so it has no newline). Any other unreadable row or file raises CorruptRunError, naming
the file (and line), before anything is written.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path


class CorruptRunError(ValueError):
    """A stored file cannot be read as written; the message names the file (and line). Nothing was changed."""


UNTOUCHED = "nothing was changed; repair the file, or delete the run's directory to train it anew"

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_root() -> Path:
    """$RLBOOK_RUNS, else `runs/` in the source checkout, else ~/.cache/rlbook/runs."""
    if "RLBOOK_RUNS" in os.environ:
        return Path(os.environ["RLBOOK_RUNS"])
    if (REPO_ROOT / "pyproject.toml").exists():
        return REPO_ROOT / "runs"
    return Path.home() / ".cache" / "rlbook" / "runs"


def reference_root() -> Path:
    """Reference runs shipped with the book (same layout, recorded where they really ran)."""
    return REPO_ROOT / "data" / "runs"


def umask() -> int:
    """The process's umask (read by setting it, then putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write a file whole or not at all (write_atomic_with)."""
    write_atomic_with(path, lambda f: f.write(data.encode() if isinstance(data, str) else data))


def write_atomic_with(path: Path, write) -> None:
    """Make a file whole or not at all: `write(file)` fills a temporary file beside it (binary, `.<name>.<random>`;
    a writer may also replace it by its name), which is given the mode a plain open() would under the umask (it was
    made 0600), fsynced, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        try:
            write(tmp)
            tmp.flush()
            os.chmod(tmp.name, 0o666 & ~umask())
            with open(tmp.name, "rb") as written:
                os.fsync(written.fileno())
        except BaseException:
            os.unlink(tmp.name)
            raise
    try:
        os.replace(tmp.name, path)
    except BaseException:
        os.unlink(tmp.name)
        raise


def leftovers(directory: Path) -> list[Path]:
    """The temporary files of writes a killed process left in a directory (write_atomic's `.<name>.<random>`)."""
    return [p for p in directory.glob(".*.*") if p.is_file()]


def write_json(path: Path, value) -> None:
    write_atomic(path, json.dumps(value, indent=1, sort_keys=True) + "\n")


def read_json(path: Path) -> dict:
    """A JSON object from a file; anything else raises CorruptRunError naming the file and the line."""
    return parse_json(path.read_bytes(), path)


def parse_json(data: bytes, path: Path) -> dict:
    """read_json on a file's bytes (path names it in errors)."""
    try:
        value = json.loads(data)
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise CorruptRunError(f"{path}: not valid JSON ({error}); {UNTOUCHED}") from None
    if not isinstance(value, dict):
        raise CorruptRunError(f"{path}: holds a {type(value).__name__}, not a JSON object; {UNTOUCHED}")
    return value


def read_rows(path: Path) -> list[dict]:
    """Rows of a JSONL file. A torn last line (no newline: the process died writing it) is dropped; any other
    unreadable line raises CorruptRunError naming the file and the line."""
    return parse_rows(path.read_bytes(), path) if path.exists() else []


def parse_rows(data: bytes, path: Path) -> list[dict]:
    """read_rows on a file's bytes (path names it in errors)."""
    rows = []
    for number, line in enumerate(data.splitlines(keepends=True), 1):
        try:
            row = json.loads(line)
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
            if not line.endswith(b"\n"):
                break  # the torn last line
            raise CorruptRunError(f"{path} line {number}: not a JSON row ({error}); {UNTOUCHED}") from None
        if not isinstance(row, dict):
            raise CorruptRunError(f"{path} line {number}: a {type(row).__name__}, not a JSON object; {UNTOUCHED}")
        rows.append(row)
    return rows


def git_commit() -> str:
    """The commit named in RLBOOK_GIT_COMMIT by whoever sent this copy of the tree elsewhere (a GPU machine's copy
    can carry a stale .git), else the checkout's short commit, else 'unknown'."""
    if os.environ.get("RLBOOK_GIT_COMMIT"):
        return os.environ["RLBOOK_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


DEVICES = ("cpu", "cuda")  # where a run is made (RunConfig.device, WarmStartConfig.device)


def environment(device: str | None = None) -> dict:
    """Where a run ran: device (the GPU's name for `device` 'cuda', the CPU's for 'cpu'; None: this machine's GPU if it
    has one), machine and library versions."""
    import torch
    import transformers

    gpu = torch.cuda.is_available() if device is None else device == "cuda"
    device = torch.cuda.get_device_name(0) if gpu else f"cpu ({platform.processor() or 'x86'})"
    return {"device": device, "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "git_commit": git_commit(), "host": platform.node()}
