# The two commands: `make book` executes and renders the book from the stored reference runs (it trains no
# reference run; `make book PROFILE=cpu` trains what is not stored), `make test` runs the tests.
# Both create .venv on a fresh machine (torch pinned to the CPU build 2.13.0) and install the package.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlbook-installed
PROFILE ?= reference

.PHONY: book test setup clean clean-runs gpu-check

setup: $(STAMP)

# verl and AReaL go without their dependencies into a folder of their own, for the export checks (requirements-engines.txt)
$(STAMP): pyproject.toml requirements-engines.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev,notebooks]"
	rm -rf $(VENV)/engines
	$(PY) -m pip install --quiet --no-deps --target $(VENV)/engines -r requirements-engines.txt
	rm -rf $(VENV)/engines/tests $(VENV)/engines/scripts  # verl's own, as top-level packages: they would shadow ours
	@touch $(STAMP)

book: $(STAMP)
	$(PY) -m rlbook.book --profile $(PROFILE)

# The tests run on TEST_WORKERS processes (pytest-xdist; CI's machine has 2 cores), a test file to a process: the
# rendered book's tests (one reference-profile build) on one, the smoke notebooks on one, the other files shared out.
TEST_WORKERS ?= 2
test: $(STAMP)
	TRITON_INTERPRET=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

# What only a CUDA GPU can check, strictly, in 7 minutes, into OUT (bench/gpu_check.py; exit 1 on any failure, 2
# without a GPU). No venv step: the machine's own python3 with torch and Triton, plus the wheels of bench/gpu_wheels.sh:
#   pip install --no-index --find-links .cache/gpu-wheels -r .cache/gpu-wheels/requirements.txt && make gpu-check OUT=gpu-results
OUT ?= gpu-results
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)
gpu-check:
	PYTHONPATH=$(CURDIR) $(GPU_PYTHON) bench/gpu_check.py --out $(OUT)

clean:
	rm -rf build

# Local runs and warm starts (runs/); the reference runs in data/ are never touched.
clean-runs:
	rm -rf runs
