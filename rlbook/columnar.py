"""A sealed run's metrics: its rows as one Parquet table (zstd), a column per key, read back as the same rows.

A run appends its rows to a journal (metrics.jsonl) while it trains; when it is complete the RunStore seals them into
metrics.parquet (rlbook.runs.Run.seal). Each key is a column: numbers, text, and nested values (the |r-1| bins) as
struct and list columns. A key whose values a column type cannot hold exactly (ints and floats mixed, a dict whose keys
vary from row to row) is a column of JSON text. Which keys each row has, in its order, is a small integer per row
(`__keys__`) naming one of the table's key sets, so a row that lacks a key and a row that holds null for it stay
apart.

Precision (float_type): a float column is float32 when float32 gives every value back exactly, float64 when its
values are short decimals that float32 would not give back (accuracies out of a few hundred problems, learning
rates: the numbers a page prints and compares), and float32 otherwise: the statistics (ratios, entropies, times)
keep 7 significant digits, where the chapters print 3. `equal_at_precision` is the check that a table gives its rows
back: every float equal, or equal to its float32 rounding where the column is float32.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

KEYSETS = "__keys__"  # the column naming each row's key set
SCHEMA_KEY = b"rlbook"  # the table's metadata: {"version", "keysets", "json_columns"}
FORMAT_VERSION = 1


def float32(value: float) -> float:
    """value rounded to float32 and back."""
    import numpy as np

    return float(np.float32(value))


def short_decimal(value: float) -> bool:
    """A float written with at most 6 significant digits (0.46, 0.0005), the way a count or a setting is."""
    return math.isfinite(value) and float(f"{value:.6g}") == value


def float_type(values: list[float]):
    """float32 when it gives back every value or the values are statistics; float64 for short decimals it would not
    give back exactly, and for values beyond float32's range (see the module's docstring)."""
    import pyarrow as pa

    rounded = [float32(v) for v in values]
    if all(r == v or (math.isnan(r) and math.isnan(v)) for r, v in zip(rounded, values)):
        return pa.float32()
    if all(short_decimal(v) for v in values) or any(math.isinf(r) and not math.isinf(v)
                                                    for r, v in zip(rounded, values)):
        return pa.float64()
    return pa.float32()


def arrow_type(values: list):
    """The column type that holds these values exactly (at float_type's precision), or None: store them as JSON."""
    import pyarrow as pa

    present = [v for v in values if v is not None]
    kinds = {type(v) for v in present}
    if not present:
        return pa.null()
    if kinds == {bool}:
        return pa.bool_()
    if kinds == {int}:
        return pa.int64() if all(-2**63 <= v < 2**63 for v in present) else None
    if kinds == {float}:
        return float_type(present)
    if kinds == {str}:
        return pa.string()
    if kinds == {list}:
        item = arrow_type([x for v in present for x in v])
        return None if item is None else pa.list_(item)
    if kinds == {dict} and len({tuple(v) for v in present}) == 1 and present[0]:
        fields = [(key, arrow_type([v[key] for v in present])) for key in present[0]]
        return None if any(t is None for _, t in fields) else pa.struct(fields)
    return None


def encode(rows: list[dict]) -> bytes:
    """The rows as a Parquet file (zstd), one column per key in first-seen order (see the module's docstring)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys, keysets = {}, {}
    for row in rows:
        keys.update(dict.fromkeys(row))
        keysets.setdefault(tuple(row), len(keysets))
    columns, as_json = {KEYSETS: pa.array([keysets[tuple(row)] for row in rows], pa.int32())}, []
    for key in keys:
        values = [row.get(key) for row in rows]
        kind = arrow_type(values)
        if kind is None:
            as_json.append(key)
            columns[key] = pa.array([None if v is None else json.dumps(v) for v in values], pa.string())
        else:
            columns[key] = pa.array(values, kind)
    schema = {"version": FORMAT_VERSION, "keysets": [list(k) for k in keysets], "json_columns": as_json}
    table = pa.table(columns).replace_schema_metadata({SCHEMA_KEY: json.dumps(schema)})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def _schema(schema, path: Path) -> dict:
    from .storage import UNTOUCHED, CorruptRunError

    try:
        schema = json.loads(schema.metadata[SCHEMA_KEY])
    except (TypeError, KeyError, ValueError):
        raise CorruptRunError(f"{path}: not a sealed metrics table (no {SCHEMA_KEY.decode()} schema); "
                              f"{UNTOUCHED}") from None
    if schema.get("version") != FORMAT_VERSION:
        raise CorruptRunError(f"{path}: metrics table format {schema.get('version')!r}, this code reads "
                              f"{FORMAT_VERSION}; {UNTOUCHED}")
    return schema


def _arrow(path: Path, read):
    """read(), its Arrow errors as CorruptRunError naming path."""
    import pyarrow as pa

    from .storage import UNTOUCHED, CorruptRunError

    try:
        return read()
    except (pa.ArrowException, OSError) as error:
        raise CorruptRunError(f"{path}: not a readable Parquet table ({str(error).splitlines()[0]}); "
                              f"{UNTOUCHED}") from None


class Table:
    """A table `encode` wrote, read from its bytes column by column as asked, each column converted to a list once;
    its rows built on first use. Callers must not change what it hands out (rlbook.runs copies the row list)."""

    def __init__(self, data: bytes, path: Path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.path = path
        self.file = _arrow(path, lambda: pq.ParquetFile(pa.BufferReader(data)))
        schema = _schema(self.file.schema_arrow, path)
        self.keysets, self.as_json, self._columns, self._rows = schema["keysets"], schema["json_columns"], {}, None
        self.names, self.num_rows = self.file.schema_arrow.names, self.file.metadata.num_rows

    def columns(self, keys: list[str]) -> list[list]:
        """Each key's value in each row, None where a row lacks it (or holds null); only missing columns are read."""
        missing = [k for k in dict.fromkeys(keys) if k not in self._columns and k in self.names]
        if missing:
            table = _arrow(self.path, lambda: self.file.read(columns=missing, use_threads=False))
            for key in missing:
                values = table.column(key).to_pylist()
                self._columns[key] = [None if v is None else json.loads(v) for v in values] \
                    if key in self.as_json else values
        return [self._columns[k] if k in self.names else [None] * self.num_rows for k in keys]

    def column(self, key: str) -> list:
        return self.columns([key])[0]

    def rows(self) -> list[dict]:
        """The rows as written: each with its own keys in its own order (its key set)."""
        if self._rows is None:
            self.columns(self.names)  # every column, read in one pass
            which, rows = self.column(KEYSETS), [None] * self.num_rows
            for number, keys in enumerate(self.keysets):
                at = [i for i, k in enumerate(which) if k == number]
                columns = self.columns(keys)
                if len(at) < len(which):
                    columns = [[column[i] for i in at] for column in columns]
                for i, values in zip(at, zip(*columns)):
                    rows[i] = dict(zip(keys, values))
            self._rows = rows
        return self._rows


def decode(data: bytes, path: Path) -> list[dict]:
    """The rows of a table `encode` wrote (path names it in errors)."""
    return Table(data, path).rows()


def _equal(stored, back, floats_equal) -> bool:
    """stored and back are the same value, nested dicts (same keys, same order) and lists included; two floats are
    equal by `floats_equal`, or both NaN."""
    if isinstance(stored, float) and type(back) is float:
        return floats_equal(stored, back) or (math.isnan(back) and math.isnan(stored))
    if type(stored) is not type(back):
        return False
    if isinstance(stored, dict):
        return list(stored) == list(back) and all(_equal(stored[k], back[k], floats_equal) for k in stored)
    if isinstance(stored, list):
        return len(stored) == len(back) and all(_equal(s, b, floats_equal) for s, b in zip(stored, back))
    return stored == back


def identical(a, b) -> bool:
    """a and b are the same value, NaN included (what a rewritten table must give back of its kept values)."""
    return _equal(a, b, lambda x, y: x == y)


def equal_at_precision(stored, back) -> bool:
    """back (read from a table) is stored (a journal's value): equal, or a float equal to its float32 rounding."""
    return _equal(stored, back, lambda s, b: b == s or b == float32(s))
