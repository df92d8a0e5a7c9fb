#!/usr/bin/env bash
# The wheels `make gpu-check` needs on a bare GPU machine that has Python 3.12, torch and Triton but no network: run
# here (with network), copy the tree with its .cache/gpu-wheels folder there, then, there:
#
#   pip install --no-index --find-links .cache/gpu-wheels -r .cache/gpu-wheels/requirements.txt && make gpu-check OUT=gpu-results
#
# What is fetched: the package's dependencies (pyproject.toml) without torch and Triton, which the machine has (and
# whose CUDA builds must match it), plus what chapter 1's notebook runs under papermill; every dependency of those is
# resolved for the target (PYTHON_VERSION, PLATFORM) and downloaded as a wheel, torch, Triton and NVIDIA's libraries
# left out. requirements.txt pins each one. Usage: bash bench/gpu_wheels.sh [folder]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.cache/gpu-wheels}
PYTHON_VERSION=${PYTHON_VERSION:-3.12}
PLATFORM=${PLATFORM:-manylinux_2_28_x86_64}
# pip evaluates dependencies' environment markers (python_version == "3.12") for the interpreter it runs in: resolve
# with the target's Python when this machine has one
if [ -z "${PYTHON:-}" ]; then
    for PYTHON in "python$PYTHON_VERSION" .venv/bin/python python3; do "$PYTHON" -c "" 2>/dev/null && break; done
fi
"$PYTHON" -c 'import sys; v, want = "%d.%d" % sys.version_info[:2], sys.argv[1]; v == want or print(
    f"note: resolving with Python {v}, not {want}: dependencies marked for {want} may be missed")' \
    "$PYTHON_VERSION"
TARGET=(--python-version "$PYTHON_VERSION" --platform "$PLATFORM" --platform manylinux2014_x86_64 --only-binary=:all:)
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The top-level requirements: pyproject's dependencies but torch, and chapter 1's notebook stack (its extras' bounds)
"$PYTHON" - "$WORK/wanted.txt" <<'EOF'
import re
import sys
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
notebook = ("papermill", "ipykernel", "matplotlib", "myst-nb", "ipywidgets", "plotly")
name = lambda requirement: re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower()
wanted = [r for r in project["dependencies"] if name(r) not in ("torch", "triton")]
wanted += [r for r in project["optional-dependencies"]["notebooks"] if name(r) in notebook]
open(sys.argv[1], "w").write("\n".join(wanted) + "\n")
EOF

# Resolve for the target without installing (pip fetches metadata only), then keep what the machine does not have
"$PYTHON" -m pip install --quiet --dry-run --ignore-installed --target "$WORK/none" "${TARGET[@]}" \
    --report "$WORK/report.json" -r "$WORK/wanted.txt"
"$PYTHON" - "$WORK/report.json" "$OUT/requirements.txt" <<'EOF'
import json
import sys

skip = ("torch", "triton", "nvidia-", "cuda-", "setuptools", "sympy", "networkx", "mpmath")  # torch's, already there
items = json.load(open(sys.argv[1]))["install"]
pins = sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in items
              if not i["metadata"]["name"].lower().startswith(skip))
open(sys.argv[2], "w").write("\n".join(pins) + "\n")
print(f"{len(pins)} wheels to fetch (of {len(items)} resolved; torch's own stack left out)")
EOF
"$PYTHON" -m pip download --quiet --no-deps "${TARGET[@]}" -d "$OUT" -r "$OUT/requirements.txt"
echo "wrote $(ls "$OUT"/*.whl | wc -l) wheels ($(du -sh "$OUT" | cut -f1)) and $OUT/requirements.txt"
