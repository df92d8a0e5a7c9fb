"""bench/README.md from bench/results/: for every benchmark its latest result, the command that made it, and its figures.

    python bench/summary.py            # rewrites bench/README.md
    python bench/summary.py --check    # exit 1 if bench/README.md is not what the results give

Each benchmark keeps its results in bench/results/<benchmark>/ (bench/record.py writes them), one file per distinct
result; older results stay there and in git history. Every figure in bench/README.md is read from a result file here,
never typed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS, README = BENCH / "results", BENCH / "README.md"


def g(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def mean(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return g(statistics.mean(values)) if values else "n/a"


def by(rows: list[dict], key: str) -> dict:
    groups: dict = {}
    for row in rows:
        groups.setdefault(row.get(key), []).append(row)
    return groups


def fidelity(d):
    for chapter, table in d["chapters"].items():
        verdicts = [s["verdict"] for s in table["signatures"]]
        yield f"{chapter} ({table['runs']} runs): " + ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts))


def fuzz_inputs(d):
    yield f"{d['total_cases']} cases, {len(d['failures'])} failures, {g(d['minutes'])} minutes"


def learning_gain(d):
    for profile, rows in by(d["rows"], "profile").items():
        yield (f"{profile}: greedy gain {mean(rows, 'gain_greedy')} (mean of {len(rows)} seeds) in "
               f"{mean(rows, 'rl_minutes')} RL minutes per run")


def lora_step(d):
    for row in d["rows"]:
        yield f"{row['preset']} x{row['layers']} layers, loss path {row['path']}: peak {g(row['peak_gib'])} GiB ({row['memory']})"


def objectives_table(d):
    for row in d["table"]:
        yield (f"{row['objective']} at s = {row['staleness']}: final greedy {g(statistics.mean(row['final_greedy']))} "
               f"(mean of seeds {row['seeds']})")


def paper_dry_run(d):
    yield f"{len(d['rows']) - 1} updates at the Qwen3-1.7B shape in {g(d['seconds'])} s, peak RSS {g(d['peak_rss_gib'])} GiB"


def paper_memory(d):
    totals = [row["total_gb"] for row in d["rows"]]
    yield f"{len(totals)} settings: {g(min(totals))} to {g(max(totals))} GB per update"


def pilots(d):
    for row in d["pilots"]:
        yield f"{row['label']}: base greedy {g(row['base'])}, gain {row['gain']:+.3g}"


def prefix_sharing(d):
    yield ", ".join(f"{k} {g(v)}" for k, v in d["summary"].items() if not k.startswith("load"))


def profile_trainer(d):
    per_update = d["cpu_s_per_update"]
    yield (f"settings {d['changes'] or 'default'}: CPU s per update " + ", ".join(f"{k} {g(v)}" for k, v in
                                                                                per_update.items()))


def static_sampling(d):
    yield (f"{d['preset']}, {d['rows']} rows x {d['max_new_tokens']} tokens, CUDA graph {d['cuda_graph']}: "
           + ", ".join(f"{path} {g(r['ms_per_rollout'])} ms" for path, r in d["paths"].items())
           + f"; same tokens: {d['same_tokens']}")


def vs_trl(d):
    for system, row in d["summary"].items():
        if "speedup" in row:  # a comparison of two systems
            yield (f"{system.replace('_vs_', ' vs ')}: {g(row['speedup'])}x per update ({g(row['cpu_speedup'])}x in CPU "
                   f"time), accuracy gap {g(row['accuracy_gap'])} (2 s.e. {g(row['two_se'])})")
        else:
            yield (f"{system}: {g(row['s_per_update'])} s per update ({g(row['cpu_s_per_update'])} CPU s), greedy "
                   f"{g(row['base_greedy'])} -> {g(row['final_greedy'])}")


def cli_speed(d):
    for row in d["rows"]:
        yield (f"{row['system']}: {g(row['cpu_s_per_update'])} CPU s per update, whole run "
               f"{g(row['whole_run_cpu_s_per_update'])} CPU s per update")
    for name, ratio in d["summary"].items():
        yield (f"{name.replace('_', ' ')}: {g(ratio['cpu_s_per_update'])}x per update, "
               f"{g(ratio['whole_run_cpu_s_per_update'])}x whole runs (CPU time)")
    for row in d["rows"]:
        if row["system"] == "cli":
            outside = {p: t["cpu_s"] for p, t in row["parts"].items() if not p.startswith("engine")}
            yield (f"CLI outside the engine: {g(100 * sum(outside.values()) / row['cpu_total_s'])}% of its CPU time: "
                   + ", ".join(f"{p} {g(s)} s" for p, s in sorted(outside.items(), key=lambda kv: -kv[1])[:4]))


def check_exports(d):
    for engine, result in d["results"].items():
        yield (f"{engine}: {result['passed']} of {result['passed'] + result['failed']} exports accepted by the "
               f"engine's own code, {len(result['refused'])} refused (one line each)")


def trl_chapter1(d):
    for backend in ("rlbook", "trl"):
        row = d["summary"][backend]
        kind, key = ("score (mean of the last 3 evaluations)", "score") if "score" in row else ("final greedy",
                                                                                               "final_greedy")
        yield (f"{backend}: {kind} {g(row[key])} +- {g(row[key + '_se'])} over "
               f"{len(row['runs'])} seeds, {g(row['s_per_update'])} s per update, {g(row['wall_time_s'])} s per run")
    c = d["summary"]["comparison"]
    yield (f"rlbook - TRL: {g(c['accuracy_gap'])} (2 s.e. {g(c['two_se'])}); rlbook {g(c['speedup_per_update'])}x "
           f"faster per update, {g(c['speedup_wall'])}x per run ({d.get('updates') or 'chapter 1s'} updates)")


def gpu_check(d):
    for name, result in d["measurements"].items():
        if "error" in result:
            yield f"{name}: no result ({result['error'].splitlines()[0][:120]})"
        else:
            yield f"{name}: " + ", ".join(f"{k} {g(v)}" for k, v in result.items()
                                          if k != "source" and not isinstance(v, (dict, list)))


def ratio_op(d):
    for result in d["results"]:
        for row in result["rows"]:
            if "ms" not in row:
                yield f"N = {result['tokens']}, {row['label']}: out of memory"
                continue
            share = "" if row.get("frac_of_peak") is None else f", {g(100 * row['frac_of_peak'])}% of the HBM floor"
            extra = "" if row.get("peak_extra_gb") is None else f", {g(row['peak_extra_gb'])} GB beyond the inputs"
            yield f"N = {result['tokens']}, {row['label']}: {g(row['ms'])} ms{share}{extra}"


def ratio_op_agreement(d):
    worst = max((diff["max_abs"], key, row["case"]) for row in d["cases"] for key, diff in row["differences"].items())
    yield (f"{d['agree']} of {d['total']} cases within the tests' tolerances; largest difference {g(worst[0])} "
           f"({worst[1]}, {worst[2]})")
    yield from (f"outside tolerance: {row['case']}" for row in d["cases"] if not row["within"])


def scalars(d):
    """Any other benchmark: its top-level numbers."""
    yield ", ".join(f"{k} {g(v)}" for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool))


def convert_store(d):
    """bench/convert_store.py --list: what is sealed, and the command that seals the rest."""
    left = sorted((e for e in d["experiments"].items() if e[1]["sealed"] < e[1]["runs"]),
                  key=lambda e: -e[1]["journal_bytes"])
    sealed = sum(e["sealed"] for e in d["experiments"].values())
    yield (f"{sealed} of {sum(e['runs'] for e in d['experiments'].values())} runs sealed, tables "
           f"{sum(e['table_bytes'] for e in d['experiments'].values()) / 1e6:.1f} MB; journals left "
           f"{sum(e['journal_bytes'] for _, e in left) / 1e6:.1f} MB")
    if left:
        yield ("to continue, largest first, as a session's size budget allows (a journal deleted counts its size, a "
               "table added about 1.25x its size; commit each experiment alone): `python bench/convert_store.py "
               f"data/runs --experiments {' '.join(name for name, _ in left)}`")
        yield "left: " + ", ".join(f"{name} {e['journal_bytes'] / 1e6:.1f} MB" for name, e in left)
    kept = {name: e["checkpoint_bytes"] / 1e6 for name, e in d["experiments"].items() if e["checkpoint_bytes"]}
    yield ("checkpoints stored (chapter 4 reads 04_lopti's weights; nothing reads the others): "
           + ", ".join(f"{name} {mb:.1f} MB" for name, mb in kept.items()))


def book_build(d):
    """A fresh `make book`, before and after a change to the store: wall seconds, and each chapter's replay."""
    for label, m in d["measurements"].items():
        chapters = ", ".join(f"{name.split('_')[0]} {s}" for name, s in m["chapters_s"].items())
        yield f"{label}: {g(m['wall_s'])} s wall ({chapters}; render {m['render_s']} s)"
    yield f"speed-up: {g(d['speedup_wall'])}x"


FIGURES = {f.__name__: f for f in (book_build, convert_store, fidelity, fuzz_inputs, learning_gain, lora_step, objectives_table, paper_dry_run,
                                   paper_memory, pilots, prefix_sharing, profile_trainer, static_sampling, vs_trl,
                                   gpu_check, check_exports, trl_chapter1, ratio_op, ratio_op_agreement, cli_speed)} | {"router_pilots": pilots}


def stamp(path: Path) -> str:
    """The result's date-time stamp (the file name's last two fields)."""
    return "-".join(path.stem.split("-")[-2:])


def latest(folder: Path) -> Path:
    return max(folder.glob("*.json"), key=stamp)


def section(folder: Path) -> str:
    """One benchmark's part of the README, from its latest result."""
    path = latest(folder)
    d = json.loads(path.read_text())
    lines = list(FIGURES.get(folder.name, scalars)(d))
    program, _, arguments = d.get("command", "").partition(" ")
    if program.startswith("/") and "/bench/" in program:  # run as an absolute path: shown from the repository root
        program = "bench/" + program.split("/bench/", 1)[1]
    if program.endswith("pytest/__main__.py"):
        program = "python -m pytest"
    elif program.endswith(".py"):
        program = f"python {program}"  # a shell command (the book's build time) is shown as it was typed
    when, env = stamp(path), d.get("environment", {})
    return "\n".join([f"## {folder.name}", "", f"`{program} {arguments}`".replace(" `", "`"), "",
                      f"Latest: [{path.name}](results/{folder.name}/{path.name}) ({when[:4]}-{when[4:6]}-{when[6:8]}, "
                      f"commit {env.get('git_commit', '?')}, {env.get('device', 'device not recorded')}; "
                      f"{len(list(folder.glob('*.json')))} result(s) in the folder)", "",
                      *[f"- {line}" for line in lines], ""])


def readme(results: Path | None = None) -> str:
    """bench/README.md as the results in `results` (default: bench/results/) give it."""
    results = RESULTS if results is None else results
    folders = sorted(p for p in results.iterdir() if p.is_dir() and any(p.glob("*.json")))
    head = ["# Benchmarks", "", "Written by `python bench/summary.py` from bench/results/ (do not edit by hand). Each "
            "benchmark's results are in `bench/results/<benchmark>/`, one file per distinct result, each with the "
            "command, commit and machine that made it (a command is shown as it was run at that commit). `make gpu-check` runs "
            "the measurements only a GPU can make.", ""]
    return "\n".join(head + [section(folder) for folder in folders]).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only compare bench/README.md with the results")
    text = readme()
    if parser.parse_args().check:
        if not README.exists() or README.read_text() != text:
            print("bench/README.md is not what bench/results/ gives: run python bench/summary.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(text)
    print(f"wrote {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
