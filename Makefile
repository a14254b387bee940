# Two commands matter: `make lab` (set up + open JupyterLab) and `make test` (set up + every test).
# Both create .venv/ at the repository root when it is missing and are fast when already set up.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
IS_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo yes || echo no)
APT := DEBIAN_FRONTEND=noninteractive apt-get
LAB_ROOT_FLAG := $(if $(filter yes,$(IS_ROOT)),--allow-root,)

.PHONY: lab test setup setup-lab system-deps test-unit test-notebooks test-strict test-notebooks-strict lint clean help

help:
	@echo "make lab    - install what the notebooks need and open JupyterLab on notebooks/"
	@echo "make test   - install everything and run every test (unit, property, oracle, notebooks, browser)"
	@echo "make setup  - install everything 'make test' needs, run nothing"
	@echo "make links  - regenerate the notebooks' links, badges and install cells (course_lib.links)"
	@echo "make release DEST=dir [REPOSITORY=url] - the student release, a tree to publish on its own"
	@echo "make site [SITE=_site] [EDITION=student|instructor] - the course site, built offline"
	@echo "make gpu-check - everything that needs an NVIDIA GPU (tests, notebooks, benchmarks), 5-9 min"

# A step that fails leaves no target behind: a venv whose creation failed (Debian without
# python3-venv) is made again on the next run, not taken as done.
.DELETE_ON_ERROR:

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "course_lib needs Python >= 3.11; $(PYTHON) is not: make PYTHON=python3.11 ..."; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# What pip installs from: pyproject.toml without its [project.urls] table, where `make links`
# keeps the repository's URL. Rewritten only when that changes, so a new URL reinstalls nothing.
INSTALL_INPUTS := $(VENV)/.install-inputs
$(INSTALL_INPUTS): pyproject.toml | $(BIN)/python
	@sed '/^\[project\.urls\]/,/^\[/{/^\[project\.urls\]/d;/^\[/!d;}' pyproject.toml > $@.new
	@if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

# Stamps re-run pip only when what it installs from changes; constraints.txt pins the versions
# the tests run with (environment.yml and binder/ pin the same).
$(VENV)/.lab-stamp: $(INSTALL_INPUTS) constraints.txt | $(BIN)/python
	$(BIN)/pip install --quiet -c constraints.txt -e '.[lab]'
	touch $@

$(VENV)/.test-stamp: $(INSTALL_INPUTS) constraints.txt | $(BIN)/python
	$(BIN)/pip install --quiet -c constraints.txt -e '.[lab,test,oracle]'
	touch $@

# make gpu-check's own setup: the test extras plus CuPy's CUDA libraries from pip
# (cupy-cuda12x[ctk]: runtime, cuBLAS, NVRTC, ...), so a machine with only a driver runs it.
$(VENV)/.gpu-stamp: $(VENV)/.test-stamp
	$(BIN)/pip install --quiet -c constraints.txt -e '.[lab,test,oracle,gpu]'
	touch $@

system-deps:
	@missing=""; \
	command -v dot >/dev/null 2>&1 || missing="graphviz"; \
	command -v "$${COURSE_LIB_CXX:-g++}" >/dev/null 2>&1 || missing="$$missing g++"; \
	if [ "$(NEED_BROWSER)" = yes ]; then command -v chromium >/dev/null 2>&1 \
	  || command -v chromium-browser >/dev/null 2>&1 || missing="$$missing chromium"; fi; \
	if [ -n "$$missing" ] && [ "$(IS_ROOT)" = yes ]; then \
	  echo "installing $$missing with apt-get"; \
	  $(APT) update -qq && $(APT) install -y -qq $$missing >/dev/null; \
	elif [ -n "$$missing" ]; then \
	  echo "missing: $$missing. Install with one of:"; \
	  echo "  sudo apt-get install -y $$missing"; \
	  echo "  conda install -c conda-forge graphviz"; \
	  echo "  brew install graphviz"; \
	  if [ -n "$$CI" ]; then echo "CI is set: failing rather than skipping what needs them"; exit 1; fi; \
	fi

setup-lab: $(VENV)/.lab-stamp system-deps

setup: $(VENV)/.test-stamp
	@$(MAKE) --no-print-directory system-deps NEED_BROWSER=yes

lab: setup-lab
	$(BIN)/jupyter lab notebooks/ $(LAB_ROOT_FLAG)

test: setup lint test-unit test-notebooks test-strict test-notebooks-strict

lint:
	$(BIN)/ruff check course_lib tests benchmarks
	$(BIN)/lint-imports

test-unit:
	$(BIN)/python -m pytest -q tests

test-notebooks:
	$(BIN)/python -m pytest -q --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:randomly notebooks

# The tests that hold on every device (engine, runtime, passes, autodiff, eager, jit, models,
# and the exercises' checks, which print a verdict rather than fail a notebook cell):
# `make test` runs them on the strict stand-in device too (course_lib.strict_device: arrays
# that refuse NumPy operands and implicit conversion, as CuPy's do), `make gpu-check` on a GPU.
DEVICE_TESTS = tests/test_runtime.py tests/test_derivatives.py tests/test_broadcast.py \
	tests/test_op_declarations.py tests/test_boundaries.py tests/test_control_and_jit.py \
	tests/test_derivative_edges.py tests/test_errors.py tests/test_gradient_trace.py \
	tests/test_graph_helpers.py tests/test_ids.py tests/test_passes.py \
	tests/test_passes_properties.py tests/test_optimize_equivalence.py \
	tests/test_optimize_numerics.py tests/test_pure_graphs.py tests/test_random_graphs.py \
	tests/test_sharpness.py tests/test_op_facts.py tests/test_lecture_figures.py \
	tests/test_llama_model.py tests/test_llama_architecture.py tests/test_llama_parity.py \
	tests/test_kv_cache.py tests/test_devices.py tests/test_exercises.py \
	tests/test_exercise_mistakes.py tests/test_same_op.py tests/test_outputs_independent.py \
	tests/test_public_parameters.py tests/test_causal_products.py tests/test_weight_gradient_layout.py \
	tests/test_executor_timing.py tests/test_accumulate_products.py

test-strict:
	COURSE_LIB_DEVICE=strict $(BIN)/python -m pytest -q -p no:randomly $(DEVICE_TESTS)

# Every notebook top to bottom on the strict device (outputs not compared: a NumPy array that
# would reach a CuPy call fails here, in CI, without a GPU).
test-notebooks-strict:
	COURSE_LIB_DEVICE=strict $(BIN)/python -m pytest -q --nbval-lax -p no:randomly notebooks

# The student edition: notebooks/ with every solution replaced by a stub, written to student/.
.PHONY: student
student: $(VENV)/.lab-stamp
	$(BIN)/python -m course_lib.exercises.edition notebooks student

# The student release, to publish on its own: `make release DEST=../my-course-student
# [REPOSITORY=https://github.com/ME/my-course-student]` (course_lib.release; no solutions).
.PHONY: release
release: $(VENV)/.lab-stamp
	@test -n "$(DEST)" || { echo "usage: make release DEST=folder [REPOSITORY=https://github.com/OWNER/REPO]"; exit 2; }
	$(BIN)/python -m course_lib.release "$(DEST)" $(if $(REPOSITORY),--repository "$(REPOSITORY)",)

# The course site, built offline (course_lib.site): `make site [SITE=_site] [EDITION=student|
# instructor]`; .github/workflows/pages.yml publishes it with GitHub Pages.
SITE ?= _site
# `=`, not `?=`: an EDITION in the environment must not publish the solutions
EDITION = student
.PHONY: site
site: $(VENV)/.site-stamp
	$(BIN)/python -m course_lib.site "$(SITE)" --edition "$(EDITION)"

$(VENV)/.site-stamp: $(INSTALL_INPUTS) constraints.txt | $(BIN)/python
	$(BIN)/pip install --quiet -c constraints.txt -e '.[lab,site]'
	touch $@

# The notebooks' generated cells (course_lib.links): previous/next links, and with a Repository
# URL in pyproject.toml the Binder/Colab badges and the install cell, in notebooks/ and student/.
.PHONY: links
links: $(VENV)/.lab-stamp
	$(BIN)/python -m course_lib.links

# Everything that needs an NVIDIA GPU: the three test pieces side by side (pytest-xdist spreads
# each over 6 workers when installed; on a fresh machine CuPy compiles each elementwise kernel
# once), then the four benchmarks one after another, so nothing else runs while they time. Each
# piece is a target of its own with its own time limit (seconds below; together at most about
# 9 minutes), and every piece runs even after one fails. Measured on an H100 machine with 16
# cores (2026-11-27): tests 29 s, engine 160 s, notebooks 65 s side by side, benchmarks about
# 150 s. Refuses without a GPU.
# On a GPU image that already has CuPy, PyTorch and pytest (a cloud notebook, a lab server),
# skip the venv: `make gpu-check GPU_PYTHON=python3 GPU_SETUP=` (course_lib from this
# checkout); GPU_PYTEST replaces the pytest options, e.g. `GPU_PYTEST=` for one process.
GPU_PYTHON ?= $(BIN)/python
GPU_SETUP ?= $(VENV)/.gpu-stamp
GPU_PYTEST ?= $(shell $(GPU_PYTHON) -c "import xdist" 2>/dev/null && echo "-n 6 --dist loadfile")
GPU_RUN = COURSE_LIB_DEVICE=gpu PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} timeout -k 10
GPU_BENCHMARKS = gpu-bench-launch gpu-bench-kernels gpu-bench-llama-tiny gpu-bench-llama-1024
.PHONY: gpu-check gpu-present gpu-tests gpu-engine gpu-notebooks gpu-benchmarks $(GPU_BENCHMARKS)
gpu-check: gpu-present
	@failed=0; \
	$(MAKE) --no-print-directory -k -j3 -O gpu-tests gpu-engine gpu-notebooks || failed=1; \
	$(MAKE) --no-print-directory -k gpu-benchmarks || failed=1; \
	if [ $$failed = 0 ]; then echo "gpu-check: every piece passed"; \
	else echo "gpu-check: a piece failed (see above)"; exit 1; fi

gpu-present: $(GPU_SETUP)
	@$(GPU_RUN) 60 $(GPU_PYTHON) -c "from course_lib.backend import gpu_available; raise SystemExit(not gpu_available())" \
	  || { echo "make gpu-check needs an NVIDIA GPU with CuPy (pip install -e '.[gpu]', which brings CuPy's CUDA libraries); none found here."; \
	       echo "Without a GPU, 'make test' checks the kernels with NVRTC and the CPU emulator."; exit 1; }

gpu-tests: gpu-present
	$(GPU_RUN) 40 $(GPU_PYTHON) -m pytest -q -m gpu $(GPU_PYTEST) tests

gpu-engine: gpu-present
	$(GPU_RUN) 300 $(GPU_PYTHON) -m pytest -q -p no:randomly $(GPU_PYTEST) $(DEVICE_TESTS)

gpu-notebooks: gpu-present
	$(GPU_RUN) 150 $(GPU_PYTHON) -m pytest -q --nbval-lax -p no:randomly $(GPU_PYTEST) notebooks

# benchmarks/llama_step.py --device gpu: PyTorch and course_lib on the same GPU, the tiny model
# (launch-bound) and the dim-1024 one.
gpu-benchmarks: $(GPU_BENCHMARKS)

gpu-bench-launch: gpu-present
	$(GPU_RUN) 15 $(GPU_PYTHON) benchmarks/kernel_launch.py

gpu-bench-kernels: gpu-present
	$(GPU_RUN) 120 $(GPU_PYTHON) benchmarks/gpu.py

gpu-bench-llama-tiny: gpu-present
	$(GPU_RUN) 30 $(GPU_PYTHON) benchmarks/llama_step.py --device gpu

gpu-bench-llama-1024: gpu-present
	$(GPU_RUN) 55 $(GPU_PYTHON) benchmarks/llama_step.py --device gpu --model gpu --rounds 2 --per-block 2

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
