# The two commands of the README: `make demo` (the main job) and `make test` (the suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test install clean

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch==2.13.0 is pinned in pyproject.toml: pip takes the CPU wheel from local disk.
# The hf extra (datasets) lets the suite test the loader of Hugging Face datasets on disk; the
# serve extra (starlette, uvicorn, prometheus-client) is `babelspec serve`, tested with openai;
# the ray extra lets it run the grid on a local Ray cluster. The llamacpp extra (the llama.cpp
# peer of bench peers) is not installed here: it builds from source (5 to 60 minutes on 2 cores)
# and its native build dies of SIGILL on this machine's CPU; `pip install -e '.[llamacpp]'`.
$(STAMP): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,hf,serve,ray]'
	touch $(STAMP)

# The quick profile of the study on the embedded default, then its report (resumes if stopped).
demo: $(STAMP)
	$(BIN)/babelspec run --profile quick -o runs/demo
	$(BIN)/babelspec report runs/demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) runs build *.egg-info
