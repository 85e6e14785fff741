# gpuops.k8s developer entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
PYTHON_VERSION ?= 3.11
# ansible-test only runs inside .../ansible_collections/<namespace>/<name>/.
TEST_TREE := .build/test/ansible_collections/gpuops/k8s
ANSIBLE_TEST := cd $(TEST_TREE) && $(BIN)/ansible-test
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.build/collections
export PATH := $(BIN):$(PATH)

.PHONY: help
help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: venv
venv:  ## Make the dev environment (venv, collections, ansible-test offline bootstrap)
	@bash scripts/bootstrap.sh

.PHONY: site
site: venv  ## Run the main job (playbooks/site.yml) against the local lab
	ansible-playbook -i inventories/lab playbooks/site.yml

.PHONY: test
test: venv  ## Run every gate and test suite (what CI runs)
	@bash scripts/run-gates.sh lint ansible-lint sanity units pytest build

.PHONY: lint
lint: venv  ## ruff lint and format check
	ruff check .
	ruff format --check .

.PHONY: ansible-lint
ansible-lint: venv  ## ansible-lint, profile production
	ansible-lint

.PHONY: test-tree
test-tree:
	@rm -rf $(TEST_TREE) && mkdir -p $(TEST_TREE)
	@git ls-files -z --cached --others --exclude-standard \
	  | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C $(TEST_TREE)
	@# Its own git index: otherwise ansible-test finds this repo's .git, where .build is ignored.
	@cd $(TEST_TREE) && git init -q && git add -A

.PHONY: sanity
sanity: venv test-tree  ## ansible-test sanity (no ignore entries)
	$(ANSIBLE_TEST) sanity --venv --python $(PYTHON_VERSION) --color no

.PHONY: units
units: venv test-tree  ## ansible-test units
	$(ANSIBLE_TEST) units --venv --python $(PYTHON_VERSION) --color no

.PHONY: pytest
pytest: venv  ## pytest: functional tests that drive the ansible CLI and real libraries
	pytest

.PHONY: build
build: venv  ## Build the collection tarball and install it into a clean collections path
	bash scripts/check-build.sh

.PHONY: bench
bench: venv  ## Benchmarks (not tests): see bench/README.md
	python bench/gpu_info.py

.PHONY: clean
clean:  ## Remove build outputs (keeps the venv and caches)
	rm -rf .build/test .build/dist tests/output
