# shoal: two commands on a fresh machine. `make demo` and `make test` both set everything up first.
# A second run reuses the venv (re-installed only when pyproject.toml changes) and the jar cache.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: setup system-deps jars demo test lint typecheck unit integration clean-cluster help bench chaos images compose-test

help:
	@echo "make demo   - set up, then the full demo: 3 nodes, Spark ingest, a leader killed, compaction, verify"
	@echo "make test   - set up, lint, type-check and run every test (starts its own cluster), then compose-test"
	@echo "make images - build the Docker images from Debian packages, PyPI and Maven Central (reused when unchanged)"
	@echo "make compose-test - the docker compose cluster end to end (builds the images, starts dockerd if needed)"
	@echo "make bench  - every benchmark (RF 3 writes, Spark sink, compaction, replication CPU, ...) and the ratio table (~14 min)"
	@echo "make chaos  - randomized faults under writes, every fault kind (CHAOS_SEED, CHAOS_DURATION=600 s, CHAOS_RUNS)"

system-deps:
	@bash scripts/system-deps.sh

$(STAMP): pyproject.toml constraints.txt
	@bash scripts/system-deps.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	@touch $(STAMP)

setup: $(STAMP) jars

jars: $(STAMP)
	$(VENV)/bin/shoal jars

demo: setup
	$(VENV)/bin/shoal demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: setup
	$(VENV)/bin/pytest -m "not integration" $(PYTEST_ARGS)

integration: setup
	$(VENV)/bin/pytest -m integration $(PYTEST_ARGS)

test: setup lint typecheck
	$(VENV)/bin/pytest $(PYTEST_ARGS)
	bash docker/compose-test.sh

images: setup
	bash docker/build-images.sh

compose-test: setup
	bash docker/compose-test.sh

BENCH_ROWS ?= 200000
BENCH_SPARK_ROWS ?= 2000000
BENCH_SIZES ?= 1000,10000,100000,1000000
BENCH_RF3_ROWS ?= 500000
BENCH_KAFKA_BYTES_ROWS ?= 100000
BENCH_COMPACTION_SMALL ?= 20000
BENCH_COMPACTION_LARGE ?= 200000
BENCH_MEMORY_ROWS ?= 1000000
BENCH_NODE_MEMORY_SECONDS ?= 90
BENCH_MAJOR_CHECK_ROWS ?= 3000000
BENCH_OUT ?= build/bench

# Every benchmark, each writing its JSON (top-level "ratio") to $(BENCH_OUT); bench.report turns
# them into the README's performance table ($(BENCH_OUT)/report.md). Sized for ~15 min on 2 cores.
# A benchmark that fails leaves an empty JSON file: the others still run, the report marks its line
# failed and exits 1, so make bench fails at the end.
bench: setup
	@mkdir -p $(BENCH_OUT) && rm -f $(BENCH_OUT)/*.json
	@echo "P1/P4 replicated writes at RF 3 (3 brokers, 3 nodes, 8 partitions) vs raw Kafka"
	-$(PY) -m bench.replicated --rows $(BENCH_RF3_ROWS) --output json > $(BENCH_OUT)/replicated.json
	-$(PY) -m bench.latency_stages --output json > $(BENCH_OUT)/latency_stages.json
	@echo "P5 Spark sink vs Spark to Parquet"
	-$(PY) -m bench.spark_sink --rows $(BENCH_SPARK_ROWS) --output json > $(BENCH_OUT)/spark_sink.json
	@echo "P6 compaction vs plain pyarrow, small and larger minors"
	-$(PY) -m bench.compaction --rows-per-round $(BENCH_COMPACTION_SMALL) --output json > $(BENCH_OUT)/compaction_small.json
	-$(PY) -m bench.compaction --rows-per-round $(BENCH_COMPACTION_LARGE) --output json > $(BENCH_OUT)/compaction_large.json
	@echo "P3 CPU per replicated row (leader, follower, follower with fresh reads)"
	-$(PY) -m bench.replication --sizes $(BENCH_SIZES) --rows $(BENCH_ROWS) --repeat 3 --output json > $(BENCH_OUT)/replication.json
	@echo "write path (RF 1), fast-forward, split, bootstrap"
	-$(PY) -m bench.write_path --rows $(BENCH_ROWS) --output json > $(BENCH_OUT)/write_path.json
	-$(PY) -m bench.fast_forward --sizes $(BENCH_SIZES) --repeat 3 --output json > $(BENCH_OUT)/fast_forward.json
	-$(PY) -m bench.split --output json > $(BENCH_OUT)/split.json
	-$(PY) -m bench.bootstrap --output json > $(BENCH_OUT)/bootstrap.json
	@echo "Kafka bytes per row at RF 3: today, and with WAL records by reference (docs/wal-by-reference.md)"
	-$(PY) -m bench.kafka_bytes --rows $(BENCH_KAFKA_BYTES_ROWS) --output json > $(BENCH_OUT)/kafka_bytes.json
	@echo "memory: a memtable of $(BENCH_MEMORY_ROWS) rows against its Arrow size"
	-$(PY) -m bench.memory --rows $(BENCH_MEMORY_ROWS) --output json > $(BENCH_OUT)/memory.json
	@echo "memory: one node leading 50 partitions, idle and under $(BENCH_NODE_MEMORY_SECONDS) s of load"
	-$(PY) -m bench.node_memory --duration $(BENCH_NODE_MEMORY_SECONDS) --output json > $(BENCH_OUT)/node_memory.json
	@echo "memory: a leader's major check of $(BENCH_MAJOR_CHECK_ROWS) rows, in key ranges and all at once"
	-$(PY) -m bench.major_check --rows $(BENCH_MAJOR_CHECK_ROWS) --output json > $(BENCH_OUT)/major_check.json
	@$(PY) -m bench.report $(BENCH_OUT) > $(BENCH_OUT)/report.md; status=$$?; cat $(BENCH_OUT)/report.md; exit $$status

CHAOS_SEED ?=
CHAOS_DURATION ?= 600
CHAOS_RUNS ?= 1

chaos: setup
	PYTHONPATH=tests/faults $(PY) -m chaos $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) --duration $(CHAOS_DURATION) --runs $(CHAOS_RUNS)
