# The targets CI runs; nothing hidden elsewhere.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint bench images clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/python -m pip install --quiet -e . --group dev
	touch $(STAMP)

run: setup
	@echo "vramdoc service on http://127.0.0.1:8080 (in-memory state; set VRAMDOC_REDIS_URL for Redis)"
	@echo "try:  curl -s --data-binary @tests/corpus/v0.32-kv-capacity-qwen.log 'http://127.0.0.1:8080/v1/diagnose?model=Qwen/Qwen2.5-0.5B-Instruct' | python3 -m json.tool"
	$(BIN)/vramdoc serve --host 127.0.0.1 --port 8080

test: setup
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check service bot tests bench
	$(BIN)/ruff format --check service bot tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# hyperscan is optional: where its wheel cannot be installed, bench/classify.py says so and skips it.
bench: setup
	-$(BIN)/python -m pip install --quiet --group bench
	$(BIN)/python bench/classify.py
	$(BIN)/python bench/estimate.py
	$(BIN)/python bench/cli.py
	$(BIN)/python bench/service.py
	$(BIN)/python bench/bot.py

# Build the three images with buildah (no daemon; base from Debian packages when none can be pulled),
# then start each as a container and probe it from outside (tests/images).
images: setup
	docker/build-local
	VRAMDOC_IMAGE_TAG=$$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml) $(BIN)/python -m pytest tests/images

clean:
	rm -rf $(VENV) build dist *.egg-info
