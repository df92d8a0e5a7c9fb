"""Fuzz every input with many examples: how many bad inputs were tried, and whether each got a clear answer.

    python bench/fuzz_inputs.py [--examples 2000]

Runs the properties of tests/test_input_fuzz.py (config fields, command-line flags, JSON arguments) with
--examples examples each, instead of the test's 100, and writes the number of cases tried and any failure to
bench/results/fuzz_inputs/fuzz_inputs-<device>-<commit>-<time>.json.
"""
from __future__ import annotations

import argparse
import inspect
import os
import shutil
import sys
import time
from pathlib import Path

from hypothesis import settings

os.environ.setdefault("TRITON_INTERPRET", "1")  # as in the tests: fused_ratio='on' counts as runnable on a CPU
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=2000, help="examples per property (default: 2000)")
    args = parser.parse_args()
    settings.register_profile("bench", max_examples=args.examples)
    settings.load_profile("bench")  # before the import: the properties' settings inherit it

    import test_input_fuzz as fuzz
    from _pytest.monkeypatch import MonkeyPatch
    from record import save_result
    from rlbook.runs import environment

    properties = [name for name in dir(fuzz) if name.startswith("test_")]
    failures, tic = {}, time.time()
    for name in properties:
        monkeypatch = MonkeyPatch()
        test = getattr(fuzz, name)
        try:
            test(monkeypatch=monkeypatch) if "monkeypatch" in inspect.signature(test).parameters else test()
        except Exception as error:  # a falsifying example: recorded, and the other properties still run
            failures[name] = str(error)[:2000]
        finally:
            monkeypatch.undo()
        print(f"{name}: {'FAILED' if name in failures else 'ok'} ({dict(fuzz.CASES)})")
    shutil.rmtree(fuzz.ROOT)
    save_result("fuzz_inputs", environment()["device"].split()[0],
                {"examples_per_property": args.examples, "properties": properties, "cases": dict(fuzz.CASES),
                 "total_cases": sum(fuzz.CASES.values()), "failures": failures, "minutes": (time.time() - tic) / 60})
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
