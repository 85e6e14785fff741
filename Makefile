# gpuops.k8s developer entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
# The venv's Python (the dev line's: scripts/ansible-matrix.py), read when a recipe runs.
PYTHON_VERSION ?= $(shell $(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# ansible-test only runs inside .../ansible_collections/<namespace>/<name>/.
TEST_TREE := .build/test/ansible_collections/gpuops/k8s
ANSIBLE_TEST := cd $(TEST_TREE) && $(BIN)/ansible-test
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.build/collections
export CONTAINERS_CONF := $(CURDIR)/lab/containers.conf
MOLECULE_ALL := $(patsubst extensions/molecule/%/molecule.yml,%,$(wildcard extensions/molecule/*/molecule.yml))
# The nvidia_* scenarios (HOST_DRIVER_LOCK below) first, then the container runtime's.
MOLECULE_SCENARIOS ?= $(filter nvidia_%,$(MOLECULE_ALL)) $(filter-out nvidia_%,$(MOLECULE_ALL))
export PATH := $(BIN):$(PATH)
# Held shared by what must not meet a driver installed on this machine (make pytest, whose
# functional and daemon tests expect none; molecule's nvidia_* scenarios, whose privileged
# nodes would see its device nodes), exclusively by the integration session that installs
# one (tests/integration/test_driver_upgrade.py; conftest.py), so lanes side by side take turns.
export HOST_DRIVER_LOCK ?= /run/lock/gpuops-host-driver.lock

.PHONY: help
help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: venv
venv:  ## Make the dev environment (venv, collections, ansible-test offline bootstrap)
	@bash scripts/bootstrap.sh

.PHONY: site
site: lab-nodes  ## Run the main job (playbooks/site.yml) on the lab's Kubernetes nodes (brings the lab and LAB_NODES nodes up first)
	ansible-playbook -i inventories/lab -i /var/lib/gpuops-lab/nodes/hosts.yml playbooks/site.yml

.PHONY: test
test: venv lab-deps sanity-deps lab-images lab-toolkit lab-cluster-deps lab-nvidia-dra  ## Run every gate and test suite (what CI runs)
	@# Lanes from the start: the lab cluster's tests at full priority, the other gates one
	@# after another at nice 19, molecule's two lanes beside them (their scenarios wait on
	@# systemd and timers, and fill the CPU the others leave while they do). The machine is
	@# busy from start to end, so the others must not slow the lab's lane: idle: and low: put
	@# a gate in a cpu cgroup of little weight too (scripts/run-gates.sh says why nice alone
	@# does not), low: for pytest's functional tests, whose commands have timeouts of a minute;
	@# the daemon's tests, which time answers in seconds, stay nice only. HOST_DRIVER_LOCK:
	@# the integration lane installs a driver on this machine first, holding the lock from its
	@# start, so the gates that must not meet that driver (molecule's nvidia_* scenarios, the
	@# daemon's and the functional tests) start after the lint gates and wait its few minutes,
	@# not it for them. Shared builds first, above.
	@bash scripts/run-gates.sh bg:integration nice lint idle:ansible-lint bg:idle:molecule-gpu \
	  bg:idle:molecule-runtime idle:sanity idle:units build idle:ee pytest-daemon low:pytest-functional \
	  idle:matrix

.PHONY: lint
lint: venv  ## ruff lint and format check; docs/variables.md up to date with the roles' specs
	ruff check .
	ruff format --check .
	@# Exit 1 with a diff and "run make docs" when stale; 2 when a role's specs and defaults disagree.
	python scripts/gen-role-docs.py --check

.PHONY: docs
docs: venv  ## Regenerate docs/variables.md from roles/*/meta/argument_specs.yml
	python scripts/gen-role-docs.py

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
	@# Collection dependencies must sit in the same ansible_collections tree (doc fragments, imports).
	@mkdir -p $(TEST_TREE)/../../kubernetes && rm -rf $(TEST_TREE)/../../kubernetes/core
	@cp -a .build/collections/ansible_collections/kubernetes/core $(TEST_TREE)/../../kubernetes/core

.PHONY: sanity-deps
sanity-deps:  ## shellcheck for ansible-test sanity (which would skip its test without it)
	@bash lab/install-deps.sh sanity

.PHONY: sanity
sanity: venv sanity-deps test-tree  ## ansible-test sanity (no ignore entries)
	$(ANSIBLE_TEST) sanity --venv --python $(PYTHON_VERSION) --color no

.PHONY: units
units: venv test-tree  ## ansible-test units
	$(ANSIBLE_TEST) units --venv --python $(PYTHON_VERSION) --color no

.PHONY: matrix
matrix: venv sanity-deps  ## ansible-test sanity and units on every other supported ansible-core line (MATRIX_LINES="2.17 ...")
	python scripts/ansible-matrix.py $(MATRIX_LINES)

.PHONY: pytest
pytest: venv lab-deps  ## pytest: tests/functional (the ansible CLI, real libraries), the daemon's unit tests and tests/daemon
	flock -s $(HOST_DRIVER_LOCK) pytest --durations=25

# make test's two parts of make pytest, each at its own priority.
DAEMON_TESTS := tests/daemon roles/device_plugin/files/gpuops-device-plugin/tests
.PHONY: pytest-functional pytest-daemon
pytest-functional: venv lab-deps  ## pytest on tests/functional alone
	flock -s $(HOST_DRIVER_LOCK) pytest --durations=25 tests/functional

pytest-daemon: venv lab-deps  ## pytest on the daemon's unit tests and tests/daemon alone
	flock -s $(HOST_DRIVER_LOCK) pytest --durations=10 $(DAEMON_TESTS)

.PHONY: build
build: venv  ## Build the collection tarball and install it into a clean collections path
	bash scripts/check-build.sh

.PHONY: ee
ee: venv  ## ansible-builder: the EE build context lists our dependencies; modules import in a venv made from it
	bash scripts/check-ee.sh

.PHONY: lab-deps
lab-deps:  ## Install what the lab needs on this host (podman, runc, debootstrap)
	@bash lab/install-deps.sh

.PHONY: lab-images
lab-images: lab-deps  ## Build the lab node images (cached)
	@bash lab/node-image.sh bookworm >/dev/null
	@bash lab/node-image.sh trixie >/dev/null

.PHONY: lab-toolkit
lab-toolkit: lab-deps  ## Build the NVIDIA Container Toolkit from its Go source into a signed apt repository (cached)
	@bash lab/toolkit/build.sh >/dev/null

.PHONY: lab-nvidia-dra
lab-nvidia-dra: lab-deps  ## NVIDIA's DRA driver for GPUs from its Go source, its node image archive and helm (cached; make test's DRA test serves a node with it)
	@bash lab/kube/helm.sh >/dev/null
	@bash lab/kube/nvidia-dra-image.sh

# molecule test for each scenario in $(1), one after another, each with its time.
define molecule_scenarios
	cd extensions && for s in $(1); do \
	  case $$s in nvidia_*) lock="flock -s $(HOST_DRIVER_LOCK)";; *) lock="";; esac; \
	  start=$$(date +%s); $$lock molecule test -s $$s || exit 1; \
	  echo "molecule: scenario $$s passed in $$(( $$(date +%s) - start )) s"; done
endef

.PHONY: molecule molecule-gpu molecule-runtime
molecule: venv lab-images lab-toolkit  ## molecule test for every scenario in extensions/molecule
	$(call molecule_scenarios,$(MOLECULE_SCENARIOS))

# make test's two molecule lanes, both beside the gates' chain from its start: the nvidia_*
# scenarios (they wait for the integration lane's driver test to end) and the others.
molecule-gpu: venv lab-images lab-toolkit  ## molecule test for the nvidia_* scenarios
	$(call molecule_scenarios,$(filter nvidia_%,$(MOLECULE_SCENARIOS)))

molecule-runtime: venv lab-images lab-toolkit  ## molecule test for the other scenarios
	$(call molecule_scenarios,$(filter-out nvidia_%,$(MOLECULE_SCENARIOS)))

.PHONY: lab-cluster-deps
lab-cluster-deps: lab-deps
	@bash lab/install-deps.sh cluster

.PHONY: lab-up
lab-up: venv lab-cluster-deps  ## Start the lab's single-node Kubernetes, with our device plugin on mock GPUs
	python lab/cluster.py up --device-plugin gpuops

.PHONY: lab-nodes
lab-nodes: lab-up  ## Start the lab's Kubernetes nodes (systemd podman nodes with containerd and a kubelet; LAB_NODES=2)
	python lab/nodes.py up

.PHONY: lab-down
lab-down: venv  ## Stop the lab's nodes and cluster (LAB_PURGE=1 also deletes its state)
	python lab/nodes.py down
	python lab/cluster.py down $(if $(LAB_PURGE),--purge)

.PHONY: lab-status
lab-status: venv  ## The lab cluster's components and nodes
	python lab/cluster.py status
	python lab/nodes.py status

.PHONY: integration
integration: venv lab-cluster-deps  ## Integration tests against the lab cluster (real kubelet and API server)
	@# First the one test that installs the lab driver package on this machine
	@# (test_driver_upgrade.py): its session takes HOST_DRIVER_LOCK as it starts (conftest.py),
	@# so the functional tests and molecule's nvidia_* scenarios, which must not find that
	@# driver's NVML or device nodes, wait its few minutes; the lab's Kubernetes nodes, created
	@# after it purged the driver, see none either. Then the lab's nodes, then the single-host
	@# tests. The slowest tests' times: where the next minutes of make test are. -v: a line per
	@# test as it ends (the lane runs for most of an hour).
	pytest -v --durations=25 tests/integration/test_driver_upgrade.py tests/integration/test_lab_nodes.py \
	  $(filter-out %/test_lab_nodes.py %/test_driver_upgrade.py,$(wildcard tests/integration/test_*.py))

.PHONY: bench
bench: venv  ## Benchmarks (not tests): see bench/README.md
	python bench/gpu_info.py
	python bench/device_plugin.py

.PHONY: lock
lock:  ## Re-resolve requirements/dev.in into the pinned requirements/dev.txt
	rm -rf .build/lock-venv && "$$(python3 scripts/ansible-matrix.py --python dev)" -m venv .build/lock-venv
	.build/lock-venv/bin/pip install -q -r requirements/dev.in
	{ echo "# Generated by 'make lock' from requirements/dev.in with $$(.build/lock-venv/bin/python -V); do not edit by hand."; \
	  .build/lock-venv/bin/pip freeze; } > requirements/dev.txt
	rm -rf .build/lock-venv

.PHONY: clean
clean:  ## Remove build outputs (keeps the venv and caches)
	rm -rf .build/test .build/dist tests/output
