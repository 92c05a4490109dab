# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test test-fast lint docs demo demo-images demo-text bench bench-quick clean

$(STAMP): setup.py
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip wheel setuptools
	$(PY) -m pip install -q -e '.[all,dev]'
	$(PY) -m compileall -q shardprep pipelines trainer  # bytecode once, as pip writes it for an installed package
	touch $(STAMP)

install: $(STAMP)

# pytest exits 5 when it collected nothing: treat that as a failure, never as success.
test: install
	$(PY) -m pytest tests benchmarks/tests -q -p no:cacheprovider --timeout=900 -ra; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no tests ran: failing"; exit 1; fi; exit $$rc

test-fast: install
	$(PY) -m pytest tests benchmarks/tests -q -m "not slow" -p no:cacheprovider

lint: install
	$(PY) -m ruff check shardprep pipelines trainer tests

docs: install
	$(PY) docs/make_cli.py
	$(PY) docs/make_charts.py

demo: install
	$(PY) -m trainer.demo

demo-images: install
	$(PY) -m trainer.demo_images

demo-text: install
	$(PY) -m trainer.demo_text

bench: install
	$(PY) -m benchmarks.run_all --profile full

bench-quick: install
	$(PY) -m benchmarks.run_all --profile quick

clean:
	rm -rf $(VENV) demo demo-images demo-text build dist *.egg-info
