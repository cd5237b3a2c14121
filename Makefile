# sluice — build, test and run.
#
#   make run      bring sluice up on a local control plane and show a pod go through it
#   make test     everything CI checks
#
# Other targets: up, down, demo-cohorts, cluster-up, cluster-down, build,
# generate, verify, unit, integration, e2e, scale-check, bench, bench-scale,
# fuzz, kit, proto-release.

SHELL := /usr/bin/env bash -o pipefail
GO ?= go
BUF := $(GO) tool -modfile=tools/buf/go.mod buf
CONTROLLER_GEN := $(GO) tool -modfile=tools/go.mod controller-gen
SERVICES := webhook grouper admitter checks
TEST_FLAGS ?= -count=1 -timeout=30m
# Test packages that start their own control plane (integration, e2e,
# crash, conformance) run two at a time: they mostly wait on the control
# plane and on the services' timers, not on the CPU (on two cores the e2e
# and crash suites take as long side by side as alone), and each starts
# its own control plane on free ports. SUITE_PARALLEL=1 runs them one by one.
SUITE_PARALLEL ?= 2

.PHONY: all
all: build

##@ Running

.PHONY: run
run: build cluster-build ## Start the control plane and sluice, then walk a pod and a pod group through it.
	hack/sluice-up.sh --demo

.PHONY: up
up: build cluster-build ## Start the control plane and sluice without the demo.
	hack/sluice-up.sh

.PHONY: demo-cohorts
demo-cohorts: ## On the system `make up` started, show two queues of a cohort borrowing and lending quota.
	hack/demo-cohorts.sh

.PHONY: down
down: ## Stop sluice and the local control plane.
	hack/sluice-down.sh

.PHONY: cluster-up
cluster-up: ## Start only the local control plane.
	hack/cluster-up.sh

.PHONY: cluster-down
cluster-down: ## Stop only the local control plane.
	hack/cluster-down.sh

.PHONY: cluster-build
cluster-build: ## Build the control-plane binaries once (cached outside the clone).
	hack/build-cluster.sh

##@ Building

.PHONY: build
build: ## Build the four services into bin/.
	@mkdir -p bin
	$(GO) build -o bin/ $(addprefix ./services/,$(SERVICES))
	CGO_ENABLED=0 $(GO) build -o bin/ $(KIT_PKG)
	$(GO) build -o bin/ ./hack/sluice-demo ./hack/sluice-certs

# The conformance kit is static (CGO_ENABLED=0), so that one download runs
# on any machine of its OS and architecture.
KIT_PKG := ./services/checks/conformance/cmd/sluice-check-conformance
KIT_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64

.PHONY: kit
kit: ## Cross-compile static sluice-check-conformance binaries and their SHA256SUMS into dist/.
	@mkdir -p dist
	@rm -f dist/sluice-check-conformance-* dist/SHA256SUMS
	@for p in $(KIT_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; ext=; [[ $$os == windows ]] && ext=.exe; \
		out=dist/sluice-check-conformance-$$os-$$arch$$ext; echo "$$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -o $$out $(KIT_PKG) || exit 1; \
	done
	cd dist && sha256sum sluice-check-conformance-* > SHA256SUMS

.PHONY: generate
generate: ## Regenerate gRPC code, deepcopy functions and CRDs.
	$(BUF) generate
	$(CONTROLLER_GEN) object paths=./pkg/api/...
	rm -rf deploy/crd/*.yaml
	$(CONTROLLER_GEN) crd paths=./pkg/api/... output:crd:dir=deploy/crd

.PHONY: proto-release
proto-release: ## Deliberately move the released-contract baseline to the current protos.
	$(BUF) build -o proto/released/v1.binpb

##@ Testing

.PHONY: test
test: verify cluster-build unit integration e2e scale-check ## Everything CI checks.

.PHONY: verify
verify: verify-generate lint ## Generated code is fresh; buf lint and breaking; gofmt; vet.

.PHONY: verify-generate
verify-generate: generate
	@changed="$$(git status --porcelain -- gen pkg/api deploy/crd)"; \
	if [[ -n "$$changed" ]]; then \
		echo "generated code is stale or edited by hand; run 'make generate' and commit:"; \
		echo "$$changed"; git --no-pager diff --stat -- gen pkg/api deploy/crd; exit 1; \
	fi; echo "generated code is up to date"

.PHONY: lint
lint:
	$(BUF) lint
	$(BUF) breaking --against proto/released/v1.binpb
	@unformatted="$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'))"; \
	if [[ -n "$$unformatted" ]]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

.PHONY: unit
unit: ## Unit tests (no control plane; every fuzz target's seed corpus), and one pass of each micro-benchmark so they keep working.
	$(GO) test $(TEST_FLAGS) $$($(GO) list ./... | grep -v -e /test/)
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x ./services/admitter/internal/scheduler/ ./services/admitter/internal/quota/ ./services/grouper/internal/fit/
	$(GO) test $(TEST_FLAGS) -tags sluice_crashpoints ./pkg/crashpoint/

# The fuzz targets, each fuzzed for FUZZTIME by `make fuzz`. `make test`
# runs their seed corpora, as plain tests: fuzzing needs every dependency
# compiled again with coverage instrumentation, minutes with a cold cache.
FUZZ_TARGETS := FuzzParseTotalCount:./pkg/podgroup/ FuzzParseSets:./pkg/podgroup/ FuzzCompute:./pkg/rolehash/ FuzzEvaluateResponse:./pkg/checkvalidate/ FuzzTree:./services/admitter/internal/quota/
FUZZTIME ?= 60s

.PHONY: fuzz
fuzz: ## Fuzz the parsers, the role hash, the check-answer validation and the cohort quota arithmetic, each for FUZZTIME (60s).
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(FUZZTIME) "$${t#*:}" || exit 1; \
	done

.PHONY: integration
integration: cluster-build ## Integration tests against a real API server.
	$(GO) test $(TEST_FLAGS) -p $(SUITE_PARALLEL) ./test/testenv/... ./test/integration/...

.PHONY: examples-deps
examples-deps: ## Install the npm packages of examples/checks-js (npm ci; quick when already installed).
	hack/npm-install.sh

.PHONY: e2e
e2e: cluster-build build examples-deps ## End-to-end tests: the four services as processes on a local control plane; the conformance kit against every shipped provider.
	SLUICE_SERVICES_BIN=$(CURDIR)/bin $(GO) test $(TEST_FLAGS) -p $(SUITE_PARALLEL) ./test/e2e/... ./test/conformance/...

# Where `make bench` keeps every run's CPU profiles (one directory per
# benchmark), and how long each lasts: long enough for a single-pod burst.
BENCH_PROFILES ?= $(CURDIR)/.bench/profiles
BENCH_PROFILE_SECONDS ?= 20

# The scale shapes of test/bench (BenchmarkScale*) take about 45 minutes
# together: `make bench` runs every other benchmark there and `make
# bench-scale` runs them. Go's -bench has no "not": this pattern is
# every benchmark whose name does not begin with BenchmarkScale.
BENCH_NOT_SCALE := ^Benchmark([^S]|S[^c]|Sc[^a]|Sca[^l]|Scal[^e])
# The share of full size `make scale-check` runs the scale shapes at: 180,
# 500 and 100 pods through sluice, and the first two again without it,
# about 100 seconds on two cores.
SCALE_CHECK ?= 0.01

.PHONY: scale-check
scale-check: cluster-build build ## The scale benchmarks' shapes at 1% (SCALE_CHECK): every workload admitted, every pod released once, no queue or cohort over its quota.
	SLUICE_BENCH_SCALE=$(SCALE_CHECK) SLUICE_SERVICES_BIN=$(CURDIR)/bin $(GO) test -count=1 -timeout=10m -run '^$$' -bench '^BenchmarkScale' -benchtime 1x ./test/bench/

.PHONY: bench
bench: cluster-build build ## Burst pods through a running system (throughput, writes per pod, CPU profiles in BENCH_PROFILES), preempt a full queue; time a scheduling cycle and a cohort tree's admission.
	SLUICE_BENCH_PROFILE_DIR=$(BENCH_PROFILES) SLUICE_BENCH_PROFILE_SECONDS=$(BENCH_PROFILE_SECONDS) $(GO) test -count=1 -timeout=60m -run '^$$' -bench '$(BENCH_NOT_SCALE)' -benchtime 1x ./test/bench/...
	$(GO) test -count=1 -run '^$$' -bench Cycle -benchmem -benchtime 2000x ./services/admitter/internal/scheduler/
	$(GO) test -count=1 -run '^$$' -bench TreeAdmit -benchmem ./services/admitter/internal/quota/
	$(GO) test -count=1 -run '^$$' -bench Check -benchmem -benchtime 20000x ./services/grouper/internal/fit/

.PHONY: bench-scale
bench-scale: cluster-build build ## Kueue's scheduler scale tests as real pods through sluice: baseline, large (at 0.4), a deep queue, and the raw ceilings; SLUICE_BENCH_SCALE shrinks them.
	SLUICE_SERVICES_BIN=$(CURDIR)/bin $(GO) test -count=1 -timeout=180m -run '^$$' -bench '^BenchmarkScale' -benchtime 1x ./test/bench/

.PHONY: help
help:
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ {printf "  %-14s %s\n", $$1, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)
