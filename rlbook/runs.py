"""RunStore: every run lives in `runs/<experiment>/<name>-<config hash>/` and is never trained twice.

A run directory holds `config.json`, its metrics (one row per model update), `meta.json` (git commit, device, library
versions, wall time, complete or not, the number of updates) and `state.safetensors` (the latest resumable
checkpoint, rlbook.checkpoint), each written whole or not at all (rlbook.storage), so a killed run is marked
incomplete and `rlbook.obtain.run_or_load` resumes it from its last checkpoint. While a run trains its rows are
appended to a journal, `metrics.jsonl`; when it is complete it is sealed (`Run.seal`): the rows go to one Parquet
table, `metrics.parquet` (rlbook.columnar), and the journal is removed. `Run.metrics` gives the same rows from either
form, `Run.columns` reads columns alone. An unreadable row, file or checkpoint, a complete run whose last row is torn
or whose rows end elsewhere than meta.json's `updates`, raises CorruptRunError naming the file (and line).

Results computed from stored weights rather than by training (chapter 5's merges and loss surfaces) live beside the
runs as a ResultSet, `runs/<experiment>/<name>/`: JSON files of {key: result}, each result computed once and each file
written atomically, and `result.json`, what made them, written last. Its name carries the versions of the code that
computed it (RESULTS_VERSION and the warm start's), so results made by other code are another folder, never read as
this code's.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import checkpoint, columnar
from .config import RunConfig
# environment and reference_root are not used here: the notebooks import them from rlbook.runs with the RunStore
from .progress import progress_bar
from .storage import (UNTOUCHED, CorruptRunError, default_root, environment, leftovers, parse_json,  # noqa: F401
                      parse_rows, read_json, read_rows, reference_root, umask, write_atomic, write_json)
from .versions import TRAINING_VERSION

RESULT_RECORD = "result.json"  # a ResultSet's record of what made it; not config.json, which only a run holds


_PARSED: dict[Path, tuple] = {}  # a run's config.json or metrics file -> (digest of its bytes, parsed): see parsed_once
JOURNAL, SEALED = "metrics.jsonl", "metrics.parquet"  # a run's rows while it trains; once it is complete


def parsed_once(path: Path, data: bytes, parse):
    """parse(data) for the file at path, computed once per content of the file (keyed by a digest of its bytes, so a
    rewrite at the same size and time is still seen): a chapter reads each run's config and rows many times, and
    parsing them was most of the time the reference book took to replay. Callers hand out copies."""
    digest = hashlib.blake2b(data, digest_size=16).digest()
    cached = _PARSED.get(path)
    if cached is None or cached[0] != digest:
        cached = _PARSED[path] = (digest, parse(data))
    return cached[1]


class SupersededRunWarning(UserWarning):
    """A stored run has this config but was made by another version of the code."""


@dataclass
class Run:
    path: Path

    @property
    def store(self) -> "RunStore":
        """The RunStore this run is in (runs/<experiment>/<run>: the root two levels up; its warm starts live there)."""
        return RunStore(self.path.parent.parent)

    @property
    def config(self) -> RunConfig:
        """The run's config (a copy; parsed and checked once per content of config.json: parsed_once)."""
        path = self.path / "config.json"

        def parse(data: bytes) -> RunConfig:
            try:
                return RunConfig.from_dict(parse_json(data, path))
            except CorruptRunError:
                raise
            except ValueError as error:
                raise CorruptRunError(f"{path}: not a valid run config ({error}); {UNTOUCHED}") from None

        return copy.deepcopy(parsed_once(path, path.read_bytes(), parse))

    @property
    def meta(self) -> dict:
        meta = self.path / "meta.json"
        return read_json(meta) if meta.exists() else {}

    @property
    def metrics(self) -> list[dict]:
        """The rows, one per update in increasing order, from the sealed table or else the journal (anything else
        raises CorruptRunError naming the file and line); a new list each call, parsed once per content of the file
        (parsed_once). A complete run's rows must end at meta.json's `updates`, its journal with a whole row."""
        sealed, journal, meta = self.path / SEALED, self.path / JOURNAL, self.meta
        if sealed.exists():
            rows = self._table().rows()
        else:
            data = journal.read_bytes() if journal.exists() else b""
            rows = parsed_once(journal, data, lambda data: self._ordered(parse_rows(data, journal), journal))
            if data and not data.endswith(b"\n") and meta.get("complete"):
                line = data.count(b"\n") + 1
                raise CorruptRunError(f"{journal} line {line}: a torn row (no newline) in a complete run; {UNTOUCHED}")
        self._check_end([row["update"] for row in rows[-1:]], sealed if sealed.exists() else journal, meta)
        return list(rows)

    def columns(self, keys: list[str]) -> dict[str, list]:
        """{key: its value in each row (None where a row lacks it)}: a sealed run's columns alone, each converted
        once per content of its table (callers get copies)."""
        if not (self.path / SEALED).exists():
            rows = self.metrics
            return {key: [row.get(key) for row in rows] for key in keys}
        table = self._table()
        self._check_end(table.column("update")[-1:], self.path / SEALED, self.meta)
        return {key: list(values) for key, values in zip(keys, table.columns(keys))}

    def _table(self) -> columnar.Table:
        """The sealed table, decoded once per content of the file, its updates checked to increase."""
        sealed = self.path / SEALED

        def parse(data: bytes) -> columnar.Table:
            table = columnar.Table(data, sealed)
            self._ordered([{"update": update} for update in table.column("update")], sealed)
            return table

        return parsed_once(sealed, sealed.read_bytes(), parse)

    @staticmethod
    def _ordered(rows: list[dict], path: Path) -> list[dict]:
        for number, row in enumerate(rows, 1):
            update = row.get("update")
            if type(update) is not int or (number > 1 and update <= rows[number - 2]["update"]):
                raise CorruptRunError(f"{path} line {number}: update {update!r} does not follow the row before "
                                      f"it; {UNTOUCHED}")
        return rows

    @staticmethod
    def _check_end(last: list[int], path: Path, meta: dict) -> None:
        """A complete run's rows end at the update its meta.json records (when it records one)."""
        if meta.get("complete") and "updates" in meta and last != [meta["updates"]]:
            raise CorruptRunError(f"{path}: the rows end at update {last[0] if last else None}, meta.json says the "
                                  f"run made {meta['updates']}; {UNTOUCHED}")

    def seal(self) -> bool:
        """Seal a complete run: its journal's rows into metrics.parquet, checked to read back equal (at the table's
        precision, rlbook.columnar), then the journal removed. True if it sealed, False if it was sealed already."""
        journal, sealed = self.path / JOURNAL, self.path / SEALED
        if not self.complete:
            raise ValueError(f"{self.path}: not complete; only a finished run is sealed")
        if not journal.exists():
            return False
        sealed.unlink(missing_ok=True)  # a seal killed before it removed the journal: the journal is the record
        rows = self.metrics
        if not rows:
            raise CorruptRunError(f"{journal}: a complete run without rows; {UNTOUCHED}")
        write_atomic(sealed, columnar.encode(rows))
        back = self.metrics
        if len(back) != len(rows) or not all(map(columnar.equal_at_precision, rows, back)):
            sealed.unlink()
            raise CorruptRunError(f"{sealed}: did not read back as {journal}'s rows; removed it, kept the journal")
        journal.unlink()
        return True

    def keep_columns(self, keys) -> int:
        """Cut a sealed run's table to the metrics `keys` (and `update`), every row kept: a store that ships what its
        readers read (bench/reference_runs.py). The kept values must read back identical, or the table is restored
        and CorruptRunError raised. Returns the bytes saved (0 when nothing was cut)."""
        sealed = self.path / SEALED
        if not sealed.exists():
            raise ValueError(f"{self.path}: not sealed; only a sealed run's table is cut")
        keep, before = {"update", *keys}, sealed.read_bytes()
        rows = self.metrics
        cut = [{k: v for k, v in row.items() if k in keep} for row in rows]
        if all(len(c) == len(row) for c, row in zip(cut, rows)):  # nothing to cut
            return 0
        write_atomic(sealed, columnar.encode(cut))
        back = self.metrics
        if len(back) != len(cut) or not all(map(columnar.identical, cut, back)):
            write_atomic(sealed, before)
            raise CorruptRunError(f"{sealed}: did not read back as the kept columns; restored the table")
        return len(before) - sealed.stat().st_size

    def finish(self, **meta) -> None:
        """Mark the run complete (meta.json, with these values) and seal it."""
        self.update_meta(complete=True, **meta)
        self.seal()

    def read_state(self, device=None) -> dict | None:
        """The checkpoint (None when there is none): state.safetensors, or an older run's state.pt read with
        weights_only (never unpickled); tensors saved on an accelerator go to `device` (default: the CPU), those saved
        on the CPU stay there. An unreadable one raises CorruptRunError."""
        return checkpoint.read(self.path, device)

    def write_state(self, state: dict) -> None:
        """Write a checkpoint whole or not at all (rlbook.checkpoint)."""
        checkpoint.write(self.path, state)

    def clean(self) -> None:
        """Remove what killed writes left in the run's directory (their temporary files)."""
        for path in leftovers(self.path):
            path.unlink(missing_ok=True)

    @property
    def complete(self) -> bool:
        return bool(self.meta.get("complete"))

    @property
    def training_version(self) -> int:
        """The TRAINING_VERSION of the code that made this run (1: made before runs recorded it)."""
        return int(self.meta.get("training_version", 1))

    @property
    def current(self) -> bool:
        """Made by this code: the directory carries the hash this code gives its config, and meta.json names no other
        TRAINING_VERSION (a run that says it was made by other code is not taken for this code's)."""
        return (self.meta.get("training_version", TRAINING_VERSION) == TRAINING_VERSION
                and self.path.name.endswith(f"-{self.config.hash()}"))

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(updates, values) of one metric, skipping rows where it was not recorded (read as columns)."""
        columns = self.columns(["update", key])
        pairs = [(u, v) for u, v in zip(columns["update"], columns[key]) if v is not None]
        return [u for u, _ in pairs], [v for _, v in pairs]

    def append(self, row: dict) -> None:
        """Append one row to the journal (fsynced)."""
        with open(self.path / JOURNAL, "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def truncate(self, last_update: int) -> None:
        """Ready the journal to resume at a checkpoint: remove what killed writes left (clean), keep the rows up to
        the checkpoint (rows past it are re-made on resume), which must be rows 0..last_update (a sealed run's rows
        go back to a journal)."""
        self.clean()
        rows = [r for r in self.metrics if r["update"] <= last_update]
        missing = sorted(set(range(last_update + 1)) - {r["update"] for r in rows})
        if missing:
            raise CorruptRunError(f"{self.path / JOURNAL} lacks the rows of updates {missing[:5]}"
                                  f"{'...' if len(missing) > 5 else ''} ({len(missing)} in all) before the checkpoint "
                                  f"at update {last_update}: resuming would lose them; {UNTOUCHED}")
        write_atomic(self.path / JOURNAL, "".join(json.dumps(r) + "\n" for r in rows))
        (self.path / SEALED).unlink(missing_ok=True)  # a sealed run reopened for training goes back to a journal

    def update_meta(self, **values) -> None:
        write_json(self.path / "meta.json", {**self.meta, **values})


def result_key(settings: dict) -> str:
    """A short, stable name for a result's settings (a hash of their JSON)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:10]


@dataclass
class ResultSet:
    """Results computed from stored weights, not by training: a folder of JSON files of {key: result} and
    `result.json`, the record of what made them (see the module's docstring)."""
    path: Path

    def cached(self, file: str, keys: dict, compute, progress: bool = True, desc: str = "") -> dict:
        """{key: result} for every key of `keys` (key -> settings), computing `compute(**settings)` only for the keys
        `file` lacks and storing each at once (an interrupted computation keeps what it finished)."""
        path = self.path / file
        stored = read_json(path) if path.exists() else {}
        missing = [k for k in keys if k not in stored]
        for key in progress_bar(missing, progress and bool(missing), desc=desc):
            stored[key] = compute(**keys[key])
            stored["environment"] = environment()
            write_json(path, stored)
        return {k: stored[k] for k in keys}

    def cached_one(self, file: str, settings: dict, compute) -> dict:
        """The one result of `settings` in `file` (keyed by result_key), computed once."""
        key = result_key(settings)
        return self.cached(file, {key: settings}, compute, progress=False)[key]

    @property
    def record(self) -> dict:
        """What made the results (written last: a set without it is incomplete, and raises CorruptRunError)."""
        if not (self.path / RESULT_RECORD).exists():
            raise CorruptRunError(f"{self.path}: no {RESULT_RECORD}, so not a complete result set; store it again")
        return read_json(self.path / RESULT_RECORD)

    def copy_to(self, target: ResultSet, record: dict) -> ResultSet:
        """Copy the JSON results (never weights) into `target`, each file atomically, then the record last."""
        for path in sorted(self.path.glob("*.json")):
            if path.name != RESULT_RECORD:
                write_json(target.path / path.name, read_json(path))
        write_json(target.path / RESULT_RECORD, record)
        return target


class RunStore:
    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else default_root()

    def find(self, config: RunConfig) -> Run | None:
        """The stored run with this config's hash (under any display name), if there is one."""
        matches = sorted((self.root / config.experiment).glob(f"*-{config.hash()}"))
        return Run(matches[0]) if matches else None

    def superseded(self, config: RunConfig) -> list[Run]:
        """Stored runs with the same settings as config but made by other code (another version, another hash)."""
        def settings(c: RunConfig) -> dict:  # engine='auto' as the engine it picks
            return {**{k: v for k, v in c.to_dict().items() if k not in ("name", "experiment")},
                    "engine": c.resolved_engine.name}

        same = settings(config)
        return [run for run in self.runs(config.experiment) if not run.path.name.endswith(f"-{config.hash()}")
                and settings(run.config) == same]

    def create(self, config: RunConfig) -> Run:
        """A new run directory holding config.json, made whole or not at all (built hidden, then renamed)."""
        run = Run(self.root / config.experiment / f"{config.name}-{config.hash()}")
        run.path.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(dir=run.path.parent, prefix=f".{run.path.name}."))
        building.chmod(0o777 & ~umask())  # mkdtemp makes it 0700
        write_json(building / "config.json", config.to_dict())
        try:
            os.rename(building, run.path)  # fails when run.path exists (it is never empty)
        except OSError:
            (building / "config.json").unlink()
            building.rmdir()
            if run.path.exists():
                raise FileExistsError(f"{run.path} exists") from None
            raise
        return run

    def runs(self, experiment: str | None = None, current_only: bool = False) -> list[Run]:
        """Every stored run (of one experiment), or only those made by this version of the code."""
        pattern = f"{experiment}/*/config.json" if experiment else "*/*/config.json"
        runs = [Run(p.parent) for p in sorted(self.root.glob(pattern))
                if p.parent.parent.name != "warmstart" and not p.parent.name.startswith(".")]
        return [run for run in runs if run.current] if current_only else runs

    def as_shown(self, experiment: str) -> list[Run]:
        """The finished runs of an experiment as the book shows them: per setting (`settings`), the run made by this
        code, else the one made by the newest older code. `lookup` answers the same question for the configs a
        chapter asks for, by hash first (so a run of this code with another engine is not taken for its config)."""
        chosen: dict[str, Run] = {}
        for run in self.runs(experiment):
            key = settings(run.config)
            if run.complete and (key not in chosen or run.training_version > chosen[key].training_version):
                chosen[key] = run
        return list(chosen.values())

    def result_set(self, experiment: str, name: str) -> ResultSet:
        """The result set `<experiment>/<name>` (its folder is made when a first result is stored)."""
        return ResultSet(self.root / experiment / name)

    def result_sets(self, experiment: str) -> list[ResultSet]:
        """Every stored result set of an experiment that holds its record, by name."""
        return [ResultSet(p.parent) for p in sorted((self.root / experiment).glob(f"*/{RESULT_RECORD}"))]



def settings(config: RunConfig) -> str:
    """A run's settings as one string: every config field but the display names and the engine, without the code's
    versions (two runs with equal settings made by different code share it; their hashes differ). The engine is how a
    run was computed, not what: runs of training version 2 name theirs by the old speed options."""
    return json.dumps({k: v for k, v in config.to_dict().items() if k not in ("name", "experiment", "engine")},
                      sort_keys=True)


def lookup(configs: list[RunConfig], root: str | Path | None = None) -> list[Run | None]:
    """The finished stored run of each config under root (the reference runs by default), made by this code or by
    older code, else None: the run with the config's hash when there is one, else an older code's run with the same
    settings (a run of this code with the same settings but another hash, e.g. another engine, is not this config's).

    Each run says which it is: `run.current` (made by this code) and `run.training_version` (the code that made it).
    An older run is what is stored, never this code's result: a page shows it labelled as such (rlbook.runset)."""
    store = RunStore(root if root is not None else reference_root())
    by_hash: dict[tuple[str, str], Run] = {}
    older: dict[tuple[str, str], Run] = {}
    for experiment in {c.experiment for c in configs}:
        for run in store.runs(experiment):
            if run.complete:
                by_hash[experiment, run.path.name.rsplit("-", 1)[-1]] = run
                if not run.current:
                    older.setdefault((experiment, settings(run.config)), run)
    return [by_hash.get((c.experiment, c.hash())) or older.get((c.experiment, settings(c))) for c in configs]
