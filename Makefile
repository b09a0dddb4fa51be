# Attention from Scratch: every command a student or instructor needs.
# `make` alone lists the targets. Each target installs what it needs first.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JOBS   ?= 2
PORT   ?= 8888
# TORCH_INDEX=https://download.pytorch.org/whl/cpu: take PyTorch's CPU-only build from PyTorch's own
# index (about 200 MB on Linux instead of the CUDA build and its NVIDIA libraries, several GB).
# Empty by default: plain PyPI, reachable everywhere pip is.
TORCH_INDEX ?=
FIRST_CHAPTER := notebooks/01_toy_attention.ipynb
PIP_TORCH_INDEX := $(if $(strip $(TORCH_INDEX)),--extra-index-url $(strip $(TORCH_INDEX)))
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout 120
ROOT_FLAG := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

.DEFAULT_GOAL := help
.PHONY: help install lab test test-chapter test-slow test-unit test-notebooks test-gpu test-browser test-nbgrader test-grading grade report exercises solutions headers \
        figures chapter bench bench-explorers bench-browser test-grade test-compat test-colab lint clean \
        site test-site results ci-times

help: ## list the targets
	@echo "Attention from Scratch - make targets:"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)/  make \1\t\2/' | expand -t 24

install: $(STAMP) ## create .venv with the tested versions (instant when already done)

$(STAMP): requirements.txt constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10 or newer is needed, found " + sys.version.split()[0])'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { echo "Could not create $(VENV): install your Python's venv module (e.g. apt-get install python3-venv)"; exit 1; }
	$(PY) -m pip install --quiet --disable-pip-version-check $(PIP_TORCH_INDEX) -r requirements.txt -c constraints.txt
	@$(PY) -c 'import sysconfig, pathlib; pathlib.Path(sysconfig.get_paths()["purelib"], "course_utils.pth").write_text(str(pathlib.Path.cwd()) + "\n")'
	@touch $(STAMP)
	@echo "Environment ready in $(VENV)"

lab: $(STAMP) ## start JupyterLab on the course (exercise notebooks)
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" --ServerApp.port=$(PORT) $(ROOT_FLAG) \
	  --LabApp.default_url=/lab/tree/$(FIRST_CHAPTER) $(LAB_ARGS)

# One torch/OpenMP thread per xdist worker (JOBS workers on as many cores), and idle threads that
# sleep instead of spinning; the kernels nbval starts inherit both. A test that needs more threads
# sets them itself (tests/ch08's two-thread training).
TEST_ENV := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE

test: $(STAMP) ## the everyday check: unit tests, notebook sync, each solution run once (strict nbval, shape comments, figures)
	$(TEST_ENV) $(PY) -m pytest -n $(JOBS) --dist loadfile $(NBVAL) -m "not slow" tests solutions

# One chapter after an edit: make test less the earlier chapters' own tests and notebooks (what is left
# out, and why, is in tools/testing/chapter.py).
test-chapter: $(STAMP) ## after editing one chapter: make test less what only earlier chapters can break, e.g. make test-chapter NN=10
	$(TEST_ENV) $(PY) -m tools.testing.chapter "$$NN" -- -n $(JOBS) --dist loadfile $(NBVAL)

test-slow: $(STAMP) ## the tests that left make test (grading machinery, tests of the test machinery, a scaffolded chapter; installs bubblewrap): see CONTRIBUTING
	@sh tests/ensure_sandbox.sh
	$(TEST_ENV) $(PY) -m pytest -n $(JOBS) --dist loadfile -m slow tests

test-unit: $(STAMP) ## unit tests only (fast)
	$(TEST_ENV) $(PY) -m pytest -n $(JOBS) -m "not slow" tests

test-browser: $(STAMP) ## run every notebook in JupyterLab in headless Chromium (installs chromium, playwright)
	@sh tests/browser/ensure_browser.sh $(PY)
	COURSE_BROWSER_TESTS=1 $(PY) -m pytest -v -s tests/browser

test-nbgrader: ## nbgrader round trip of every chapter, or CHAPTERS="01 10" (creates .venv-nbgrader with nbgrader 0.9.6; installs bubblewrap)
	@sh tests/ensure_sandbox.sh
	COURSE_NBGRADER_CHAPTERS="$(CHAPTERS)" $(PYTHON) tools/grading/roundtrip.py

test-grade: ## make grade on a class of 28 vs sequential autograde, PostgreSQL, the report (about 20 min here in the sandbox; installs bubblewrap)
	@sh tests/ensure_sandbox.sh
	$(PYTHON) tools/grading/roundtrip.py --class

# .ci/run's grading step: both targets spend most of their time waiting on kernels, sandboxes and
# per-cell limits (measured: about 45 % of one core each), so they run side by side; each line of
# their output is printed whole. The sandbox and .venv-nbgrader are made ready first, once.
test-grading: ## make test-nbgrader and make test-grade side by side (.ci/run's grading step; installs bubblewrap)
	@sh tests/ensure_sandbox.sh
	$(PYTHON) tools/grading/roundtrip.py --venv-only
	$(MAKE) --no-print-directory -j2 --output-sync=line test-nbgrader test-grade

grade: ## autograde a class in parallel, each student in a sandbox: make grade COURSE=dir ASSIGNMENT=name [WORKERS=4] [DB=url] [STUDENTS="a b"] [UNSANDBOXED=1]
	@test -n "$(COURSE)" -a -n "$(ASSIGNMENT)" || { echo 'usage: make grade COURSE=dir ASSIGNMENT=name [WORKERS=4] [DB=url] [STUDENTS="a b"] [FORCE=1] [UNSANDBOXED=1]'; exit 2; }
	$(PYTHON) tools/grading/grade.py "$(COURSE)" "$(ASSIGNMENT)" $(if $(WORKERS),--workers $(WORKERS)) \
	  $(if $(DB),--db "$(DB)") $(if $(STUDENTS),--students $(STUDENTS)) $(if $(filter 1 yes true,$(FORCE)),--force) \
	  $(if $(filter 1 yes true,$(UNSANDBOXED)),--no-sandbox)

report: ## what a class got wrong, after make grade: make report COURSE=dir ASSIGNMENT=name [DB=url]
	@test -n "$(COURSE)" -a -n "$(ASSIGNMENT)" || { echo 'usage: make report COURSE=dir ASSIGNMENT=name [DB=url]'; exit 2; }
	$(PYTHON) tools/grading/report.py "$(COURSE)" "$(ASSIGNMENT)" $(if $(DB),--db "$(DB)")

test-notebooks: $(STAMP) ## strict nbval of the solution notebooks only (use this on a GPU box)
	$(PY) -m pytest -n $(JOBS) --dist loadfile $(NBVAL) solutions

test-gpu: $(STAMP) ## on a CUDA machine, in 6 min: nbval of every solution, the checks, a short bench; one JSON (OUT=dir)
	$(PY) -m tools.testing.gpu $(if $(OUT),--out $(OUT))

exercises: $(STAMP) ## regenerate from solutions/: chapters' code, missing figures, notebooks/, the generated listings (README, docs/instructors.md)
	$(PY) -m tools.build.nbtools exercises

chapter: $(STAMP) ## scaffold a new chapter's 7 files: make chapter NN=11 NAME=temperature [TITLE="..."]
	@test -n "$(NN)" -a -n "$(NAME)" || { echo 'usage: make chapter NN=11 NAME=temperature [TITLE="..."]'; exit 2; }
	$(PY) -m tools.build.scaffold $(NN) $(NAME) $(if $(TITLE),--title "$(TITLE)")

headers: $(STAMP) ## rewrite the Colab badge and setup cell of every solution (REF=v1.0: the tag they belong to)
	$(PY) -m tools.build.nbtools headers $(if $(REF),--ref $(REF))

solutions: $(STAMP) ## re-execute the solution notebooks in place (refreshes stored outputs)
	$(PY) -m tools.build.nbtools execute

figures: $(STAMP) ## re-make every figure in figures/ from code
	$(PY) -m tools.figures.catalogue

bench: $(STAMP) ## time chapter 07's attention variants in interleaved rounds into results/ and docs/results/bench.json (FULL=1; OUT=folder)
	$(PY) -m tools.bench.cli --record --out $(or $(OUT),results) $(if $(filter 1 yes true,$(FULL)),--full)

bench-explorers: $(STAMP) ## time every explorer from a control change to its new picture (median of 7 passes) into docs/results/
	$(PY) -m tools.bench.explorers --record

bench-browser: $(STAMP) ## every explorer in JupyterLab (headless Chromium): key press to new picture, median per explorer, with the load
	@sh tests/browser/ensure_browser.sh $(PY)
	$(PY) tests/browser/bench_browser.py $(if $(PASSES),--passes $(PASSES))

test-compat: ## `make test` in a throwaway venv with another torch: TORCH=2.3.1 [PYTHON=python3.12]
	@set -e; \
	test -n "$(TORCH)" || { echo "usage: make test-compat TORCH=2.3.1 [PYTHON=python3.12]"; exit 2; }; \
	py=$$($(PYTHON) -c 'import sys; print(sys.executable)' 2>/dev/null) || \
	  py=$$(ls -d "$$(pyenv root 2>/dev/null)"/versions/$(patsubst python%,%,$(PYTHON)).*/bin/python 2>/dev/null | tail -n 1); \
	test -x "$$py" || { echo "No Python found for PYTHON=$(PYTHON)"; exit 2; }; \
	venv=.venv-compat-$(TORCH)-py$$("$$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	if [ ! -f $$venv/.installed ]; then \
	  echo "Creating $$venv (torch $(TORCH): a CUDA wheel is a few GB)"; \
	  "$$py" -m venv $$venv; \
	  echo "torch==$(TORCH)" > $$venv/constraints.txt; \
	  case "$(TORCH)" in 2.[0-3].*) echo "numpy<2" >> $$venv/constraints.txt;; esac; \
	  $$venv/bin/python -m pip install --quiet -r requirements.txt -c $$venv/constraints.txt; \
	  touch $$venv/.installed; \
	fi; \
	$$venv/bin/python -c 'import sys, torch, numpy; print("compat: Python", sys.version.split()[0], "torch", torch.__version__, "numpy", numpy.__version__)'; \
	status=0; PYTHONPATH="$(CURDIR)" $(TEST_ENV) $$venv/bin/python -m pytest -q -p no:cacheprovider -rf -n $(JOBS) --dist loadfile -m "not slow" \
	  --junitxml=$$venv/junit.xml $(NBVAL) tests solutions || status=$$?; \
	PYTHONPATH="$(CURDIR)" $$venv/bin/python -m tools.site.results compat --junit $$venv/junit.xml; \
	exit $$status

test-colab: $(STAMP) ## every notebook alone in a replica of Colab's runtime (creates .venv-colab: Python 3.13, Colab's pins)
	$(PY) -m tools.testing.colab_replica

SITE_VENV  ?= .venv-site
SITE_STAMP := $(SITE_VENV)/.installed

$(SITE_STAMP): tools/site/requirements.txt tools/site/constraints.txt
	@test -x $(SITE_VENV)/bin/python || $(PYTHON) -m venv $(SITE_VENV)
	$(SITE_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r tools/site/requirements.txt -c tools/site/constraints.txt
	@touch $@

site: $(STAMP) $(SITE_STAMP) ## build the course website into build/site/html (creates .venv-site: Sphinx, myst-nb; offline)
	OMP_NUM_THREADS=1 $(PY) -m tools.site.build --sphinx $(SITE_VENV)/bin/sphinx-build --jobs $(JOBS)

test-site: site ## build the site, then open every page and move every explorer control in headless Chromium
	@sh tests/browser/ensure_browser.sh $(PY)
	COURSE_SITE_TESTS=1 $(PY) -m pytest -v -s -p no:cacheprovider tests/site

results: $(STAMP) ## rewrite the tables of docs/results.md from the result files docs/results/*.json
	$(PY) -m tools.site.results

ci-times: $(STAMP) ## run each step of .ci/run in turn, timed, into docs/results/ci.json (as long as CI)
	$(PY) -m tools.site.results ci

lint: $(STAMP) ## ruff over the package, tests and notebooks
	$(VENV)/bin/ruff check course_utils tools tests conftest.py solutions

clean: ## remove caches and results (keeps .venv; `rm -rf .venv` for a full reset)
	rm -rf results .pytest_cache .ruff_cache
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +
