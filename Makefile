# priogate: `make run` starts a local control plane with priogate inside it; `make test` is CI.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help venv lock lint format test test-unit test-integration test-e2e test-upstream upstream-e2e controlplane \
        run up down status \
        manifests chart image test-image test-deploy image-lock helm kube-score certs wrk bench-webhook bench-quota bench-reserved-pod bench-decision bench-ledger bench-enqueue bench-preemption bench-pod-cache bench-pod-create bench-preemption-live clean

help:
	@echo "make run        start etcd, kube-apiserver, controller-manager, scheduler, kwok and priogate (Ctrl-C stops)"
	@echo "make up / down  the same in the background / stop it"
	@echo "make test       lint, unit, integration, image, e2e, deploy (real node) and upstream e2e tests (what CI runs)"
	@echo "make image      build the image with buildah (make test-image: and check that it runs)"
	@echo "make test-deploy  the chart and the image on a real node (containerd + kubelet; root)"
	@echo "make test-upstream  upstream's own preemption and priority-quota e2e tests against the local control plane"
	@echo "make bench-webhook | bench-quota | bench-reserved-pod | bench-decision | bench-ledger | bench-enqueue | bench-preemption | bench-pod-cache | bench-pod-create | bench-preemption-live"

$(STAMP): requirements-dev.txt requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	@touch $@

venv: $(STAMP)

# Re-pin every dependency from requirements*.in.
lock: $(STAMP)
	$(PY) hack/lock.py

lint: $(STAMP) helm kube-score
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	@# no tracked file speaks of work sessions: versions, dates and commits name history
	$(PY) hack/no_sessions.py
	$(VENV)/bin/hadolint Dockerfile
	$(PY) hack/chart.py --check
	"$$(bash hack/helm/build.sh)" lint --strict charts/priogate
	@# kube-score over the kustomize base and the chart in both modes; fails on a CRITICAL finding
	@# not justified on its object (the flags, and why: hack/kube-score/check.sh)
	bash hack/kube-score/check.sh
	@# the layering (pyproject.toml [tool.importlinter]); prints only the contracts' verdicts
	@$(VENV)/bin/lint-imports --no-cache | sed -n '/^Contracts$$/,$$p'; exit $${PIPESTATUS[0]}

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

test-unit: $(STAMP) helm
	$(PY) -m pytest tests/unit -q -p no:cacheprovider

test-integration: $(STAMP)
	$(PY) -m pytest tests/integration -q -p no:cacheprovider

controlplane:
	bash hack/controlplane/build.sh

# helm, built from the Go module proxy into the same cache as the control plane (lint, tests).
helm:
	bash hack/helm/build.sh

# kube-score, built the same way (make lint's static check of the pods priogate ships).
kube-score:
	bash hack/kube-score/build.sh

test-e2e: $(STAMP) controlplane helm
	$(PY) -m pytest tests/e2e -q -p no:cacheprovider

# Upstream's e2e.test (k8s.io/kubernetes/test/e2e at the control plane's version), built from the Go
# module proxy into the same cache as the control plane.
upstream-e2e:
	bash hack/upstream/build.sh

# Who preempts single pods in the upstream run, one run per mode: default (kube-scheduler's
# DefaultPreemption) and/or priogate (`localcluster --preemptor=priogate`). Every mode runs even
# when an earlier one failed.
UPSTREAM_MODES := default priogate

# Upstream's SchedulerPreemption and ResourceQuota [Feature:PodPriority] e2e tests against the local
# control plane (hack/upstream/run.py; skipped tests and their reasons: hack/upstream/skips.yaml).
test-upstream: $(STAMP) controlplane upstream-e2e
	@rc=0; for mode in $(UPSTREAM_MODES); do $(PY) hack/upstream/run.py --mode $$mode || rc=1; done; exit $$rc

test: lint test-unit test-integration test-image test-e2e test-deploy test-upstream

# ARGS passes options through, e.g. make run ARGS=--keep-priority-plugin
run: $(STAMP) controlplane
	$(PY) -m localcluster run $(ARGS)

up: $(STAMP) controlplane
	$(PY) -m localcluster up $(ARGS)

down: $(STAMP)
	$(PY) -m localcluster down

status: $(STAMP)
	$(PY) -m localcluster status

# Regenerate manifests/webhook-configurations.yaml from the registered rule sets, and the chart
# from manifests/.
manifests: $(STAMP)
	$(PY) -m webhook.configuration > manifests/webhook-configurations.yaml
	$(PY) hack/chart.py

# Regenerate charts/priogate/ (templates, CRDs, values.yaml) from manifests/ and the registry.
chart: $(STAMP)
	$(PY) hack/chart.py

# The image, built from the Dockerfile with buildah (hack/image/build.sh: installs buildah, podman,
# runc and mmdebstrap when missing and root; where the Dockerfile's pinned base cannot be pulled,
# builds an equivalent from Debian bookworm's packages and says so). IMAGE/TAG name it.
IMAGE ?= localhost/priogate
TAG ?= $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' priogate/__init__.py)
image:
	IMAGE=$(IMAGE) TAG=$(TAG) bash hack/image/build.sh

# The built image runs: python -m webhook --help and python -m controller --help exit 0, as uid
# 65532, with its OCI labels (hack/image/test.sh).
test-image: image
	bash hack/image/test.sh $(IMAGE):$(TAG)

# The image and the chart on a real node (containerd + kubelet; root): helm install, admissions
# through the chart's pods, upgrade / webhook pod loss / leader loss under load, uninstall
# (tests/deploy/; docs/image-and-node.md). Ends with the one-line summary.
test-deploy: $(STAMP) controlplane helm image
	@rm -f .local/deploy-summary.txt
	PRIOGATE_IMAGE=$(IMAGE):$(TAG) $(PY) -m pytest tests/deploy -q -s -p no:cacheprovider
	@cat .local/deploy-summary.txt

# Re-hash the image's pins (requirements-image.txt, for pip --require-hashes in the Dockerfile).
image-lock: $(STAMP)
	$(PY) hack/image_lock.py

certs: $(STAMP)
	$(PY) -m certs --out .local/certs

# bench-webhook drives the server with wrk (Debian's package `wrk`): installed here when
# missing and we are root, else the exact command to run, and a failure.
wrk:
	@command -v wrk >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing wrk: apt-get update && apt-get install -y wrk" >&2; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; \
	else \
		echo "make bench-webhook needs wrk. Install it, then run make bench-webhook again:" >&2; \
		echo "    sudo apt-get update && sudo apt-get install -y wrk    # Debian/Ubuntu" >&2; \
		echo "(elsewhere: https://github.com/wg/wrk, then put wrk on PATH)" >&2; \
		exit 1; \
	fi

bench-webhook: $(STAMP) wrk
	$(PY) -m bench.webhook $(ARGS)

bench-quota: $(STAMP) controlplane
	$(PY) -m bench.quota $(ARGS)

bench-reserved-pod: $(STAMP) controlplane
	$(PY) -m bench.reserved_pod_create $(ARGS)

bench-decision: $(STAMP)
	$(PY) -m bench.podgroup_decision $(ARGS)

bench-ledger: $(STAMP) controlplane
	$(PY) -m bench.ledger_turn $(ARGS)

bench-enqueue: $(STAMP)
	$(PY) -m bench.enqueue $(ARGS)

bench-preemption: $(STAMP)
	$(PY) -m bench.preemption $(ARGS)

bench-pod-cache: $(STAMP)
	$(PY) -m bench.pod_cache $(ARGS)

# Pod CREATE latency through kube-apiserver with and without priogate, both modes (ARGS passes
# options through, e.g. ARGS=--modes=kept).
bench-pod-create: $(STAMP) controlplane
	$(PY) -m bench.pod_create $(ARGS)

# A high-priority pod's creation to its binding on a full cluster of 100 kwok nodes: priogate's
# preemptor mode against kube-scheduler's own preemption, two clusters side by side, one run.
bench-preemption-live: $(STAMP) controlplane
	$(PY) -m bench.preemption_live $(ARGS)

clean:
	rm -rf .local .pytest_cache .ruff_cache .hypothesis
