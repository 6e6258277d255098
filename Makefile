# Two commands on a fresh machine: `make demo` (main job) and `make test` (tests).
# Both build the virtual environment first when it is missing or older than its inputs.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
PYTHON ?= python3
# This machine's pip config names local mirrors that may be absent; keep those warnings out of the log.
PIP_QUIET := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-stamp
# ROS 2 Jazzy (rclpy 7): its own venv from requirements-jazzy.txt.
VENV_JAZZY := .venv-jazzy
BIN_JAZZY := $(VENV_JAZZY)/bin
STAMP_JAZZY := $(VENV_JAZZY)/.setup-stamp
# Every test run gets its own DDS domain and stays on localhost (docs/design.md §7).
TEST_ENV := ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
# The suite in file order over 2 processes by default (what CI runs: pytest-xdist, `--dist loadgroup`
# keeps a module on one worker, and the modules test/isolation.py groups on one worker each, one after
# the other; each worker has its own slice of DDS domains). On the quiet 2-core VM (2026-12-02) the
# whole check took 17.6 min (Kilted 8.9, Jazzy 8.7) against 35 min in one process. PYTEST_WORKERS=0
# runs it in one process (an earlier 2-worker run at load 15-20 from other jobs took 56 min with
# wall-clock graph tests starved: on a busy machine, use one). PYTEST_ORDER= (empty) runs it in a new
# random order (pytest-randomly; the log ends with the seed; rerun one with
# PYTEST_ORDER=--randomly-seed=N).
PYTEST_WORKERS ?= 2
PYTEST_ORDER ?= -p no:randomly
PYTEST_ARGS := -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ORDER)

.PHONY: setup setup-jazzy test test-kilted test-jazzy test-timing demo lint bench clean check-lerobot-reader

setup: $(STAMP)

$(STAMP): requirements.txt requirements-common.txt setup.py setup.cfg package.xml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip $(PIP_QUIET)
	$(BIN)/python -m pip install --quiet -r requirements.txt $(PIP_QUIET)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e . $(PIP_QUIET)
	touch $(STAMP)

# The whole check, what CI runs (.ci/run): the lint, then the suite on Kilted, then on Jazzy. One after
# the other: run side by side on 2 cores, the two suites reached the graph bring-up tests together and
# starved them (seven processes and torch twice over); each run keeps its own DDS domain.
test: lint $(STAMP_JAZZY)
	SIM2REAL_TEST_DOMAIN_RANGE=1-116 $(MAKE) --no-print-directory test-kilted
	SIM2REAL_TEST_DOMAIN_RANGE=117-232 $(MAKE) --no-print-directory test-jazzy

# The suite on ROS 2 Kilted only (.venv).
test-kilted: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest test -q -m "not timing" $(PYTEST_ARGS)

# The same stack and suite on ROS 2 Jazzy (rclpy 7): its own venv from requirements-jazzy.txt.

setup-jazzy: $(STAMP_JAZZY)

$(STAMP_JAZZY): requirements-jazzy.txt requirements-common.txt setup.py setup.cfg package.xml
	test -x $(BIN_JAZZY)/python || $(PYTHON) -m venv $(VENV_JAZZY)
	$(BIN_JAZZY)/python -m pip install --quiet --upgrade pip $(PIP_QUIET)
	$(BIN_JAZZY)/python -m pip install --quiet -r requirements-jazzy.txt $(PIP_QUIET)
	$(BIN_JAZZY)/python -m pip install --quiet --no-deps --no-build-isolation -e . $(PIP_QUIET)
	touch $(STAMP_JAZZY)

test-jazzy: $(STAMP_JAZZY)
	$(TEST_ENV) $(BIN_JAZZY)/python -m pytest test -q -m "not timing" $(PYTEST_ARGS)

# The closed-loop latency compensation ratio over DDS with the sim as a process on the wall clock:
# it holds on an idle machine and moves with CPU contention. make test checks the same acceptance
# figures deterministically in sim time.
test-timing: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest test -q -m timing

# Exported datasets read frame by frame by LeRobot's own reader (LeRobotDataset, lerobot-dataset 0.4.4)
# in a venv of its own (tools/lerobot_reader/requirements.txt: about 5.5 GB, and Debian's ffmpeg
# libraries for torchcodec). Optional: not part of make test / CI.
VENV_LEROBOT := .venv-lerobot
check-lerobot-reader: $(STAMP)
	test -x $(VENV_LEROBOT)/bin/python || $(PYTHON) -m venv $(VENV_LEROBOT)
	$(VENV_LEROBOT)/bin/python -m pip install --quiet -r tools/lerobot_reader/requirements.txt $(PIP_QUIET)
	$(BIN)/python tools/lerobot_reader/make_datasets.py build/lerobot_reader > build/lerobot_reader.list
	$(VENV_LEROBOT)/bin/python tools/lerobot_reader/read_dataset.py $$(cat build/lerobot_reader.list)

# ruff, then the package layers (.importlinter: which package may import which).
lint: $(STAMP)
	$(BIN)/ruff check sim2real_ros test launch benchmarks tools
	$(BIN)/lint-imports --no-cache

demo: $(STAMP)
	$(BIN)/sim2real demo

bench: $(STAMP)
	$(BIN)/sim2real bench --json bench_out/bench.json

clean:
	rm -rf $(VENV) $(VENV_JAZZY) $(VENV_LEROBOT) demo_out bench_out build *.egg-info
