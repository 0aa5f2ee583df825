# platformd — run `make` (or `make help`) for the list of targets.
#
# Every target that needs PostgreSQL or RabbitMQ depends on `services`, which
# installs and starts them when missing (scripts/services.sh). Tools (buf,
# golangci-lint, staticcheck, protoc plugins) are pinned in tools/*/go.mod and
# run with `go tool -modfile=...`: nothing to install by hand but Go and make.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
# Targets are steps of one pipeline (test = services, unit, pooler, fuzz,
# chaos, chaos-cluster, verify); never run them side by side, even under
# make -j. The exceptions are `test`'s own, through scripts/beside.sh, each
# a pair that shares no service state and leaves the other CPU it does not
# use (measured on 2 cores, warm caches): the nested modules and fuzz
# beside the root's race tests (351 s for the three, against 296 + 41 + 21
# in turn); the cluster's nodes booting beside the chaos suite; verify
# (linters and buf, CPU-bound, touching no service) beside the chaos
# phases, which mostly wait on the faults they inject.
.NOTPARALLEL:

GO ?= go## Go command
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres## PostgreSQL for tests and demo
TEST_AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/## RabbitMQ for tests and demo
FUZZTIME ?= 20s## how long `make fuzz` (part of `make test`) fuzzes FuzzDecode
BENCHTIME ?= 1s## -benchtime for the Go micro-benchmarks in `make bench`
BENCH_FLAGS ?=## flags for the bench program, e.g. BENCH_FLAGS='-h' to list them
TENANTS ?= 100## services hosted by `make tenants`
BREAKING_AGAINST ?=## buf input for `make breaking`; empty: branch main, else HEAD~1
SERVICES_NO_DEPLOY_TOOLS ?=## 1: scripts/services.sh skips promtool and systemd-analyze (their checks then skip)
# The deploy checks fail, rather than skip, when promtool or systemd-analyze
# is missing, unless the services script was told not to install them.
PLATFORMD_REQUIRE_DEPLOY_TOOLS ?= $(if $(filter 1,$(SERVICES_NO_DEPLOY_TOOLS)),0,1)
export GO TEST_DATABASE_URL TEST_AMQP_URL BREAKING_AGAINST SERVICES_NO_DEPLOY_TOOLS PLATFORMD_REQUIRE_DEPLOY_TOOLS

LINT_MOD := tools/lint/go.mod
GOLANGCI_LINT := $(GO) tool -modfile=$(LINT_MOD) golangci-lint
STATICCHECK := $(GO) tool -modfile=$(LINT_MOD) staticcheck

.PHONY: help
help: ## show this help
	@echo 'Usage: make <target> [VAR=value ...]'
	@echo
	@echo 'Targets:'
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_ -]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo 'Variables:'
	@awk 'BEGIN {FS = " *\\?= *|## "} /^[A-Z_]+ \?=.*## / {printf "  %-18s %s (default: %s)\n", $$1, $$3, ($$2 == "" ? "empty" : $$2)}' $(MAKEFILE_LIST)

.PHONY: services
services: ## install (if missing) and start PostgreSQL and RabbitMQ
	@bash scripts/services.sh

.PHONY: demo
demo: services ## run the demo shop against local PostgreSQL and RabbitMQ
	$(GO) run ./examples/shop/cmd/demo

.PHONY: test
test: services ## everything CI runs: services, race tests (nested modules and fuzz beside), PgBouncer, then chaos and chaos-cluster with verify beside them
	@bash scripts/beside.sh nested-and-fuzz -- $(MAKE) --no-print-directory unit-nested fuzz -- $(MAKE) --no-print-directory unit-root
	@$(MAKE) --no-print-directory pooler
	@bash scripts/beside.sh verify -- $(MAKE) --no-print-directory verify -- $(MAKE) --no-print-directory chaos-all

# Modules of their own inside the repository that CI builds, vets, lints and
# tests too: examples/billing is a service's own daemon built only from the
# public packages (consumer, daemon), so the embedding API stays usable from
# outside; deploy/image (the image builder, go-containerregistry) and
# deploy/helmcheck (the chart's lint and schema check, helm's library) keep
# their dependencies out of the product's go.mod. `go list ./...` at the
# root never includes them.
NESTED_MODULES := examples/billing deploy/image deploy/helmcheck
# deploy/helmcheck's tests run without -race: they hold no goroutine of
# ours (a chart's YAML rendered and linted by helm's library, one test at a
# time), and the race build of helm's and Kubernetes' libraries is 209 s of
# CPU (111 s on 2 cores) on a machine whose build cache is empty: the
# largest single step of a fresh `make test`. vet and lint still check it.
RACE_NESTED_MODULES := deploy/image examples/billing

.PHONY: unit
unit: services ## go test -race on all packages (but the chaos suite, run by `make chaos`), then the nested modules (deploy/helmcheck without -race)
	@$(MAKE) --no-print-directory unit-root unit-nested

# `make unit` runs the nested modules after the root's packages; `make
# test` runs them beside (see .NOTPARALLEL above). On an empty build cache
# the two compile some packages twice when both reach them at once (a go
# command does not wait on another's build of the same package): a fresh
# run pays that for the overlap.
.PHONY: unit-root
unit-root: ## go test -race on the root module's packages but the chaos suite (part of unit)
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/test/chaos')

.PHONY: unit-nested
unit-nested: ## go test on the nested modules, -race but deploy/helmcheck (part of unit)
	cd deploy/helmcheck && $(GO) test -count=1 -timeout 10m ./...
	@for d in $(RACE_NESTED_MODULES); do \
		echo "cd $$d && $(GO) test -race -count=1 ./..."; \
		(cd $$d && $(GO) test -race -count=1 -timeout 10m ./...) || exit 1; \
	done

.PHONY: deploy-check
deploy-check: services ## the deploy/ checks alone (part of unit): alert rules, systemd unit, image, Helm chart, dashboard vs a live /metrics
	$(GO) test -race -count=1 ./deploy/...
	$(GO) test -race -count=1 -run 'TestDeployMetricNames|TestPromqlMetricNames|TestDashboardCovers|TestImageRunsUnderPodman|TestHelmSampleMigratesOnTheReleaseBinary' ./cmd/platformd/
	$(GO) test -race -count=1 -run 'TestAlertCommandsExist' ./cmd/platformctl/
	cd deploy/image && $(GO) test -race -count=1 ./...
	cd deploy/helmcheck && $(GO) test -count=1 ./...

.PHONY: fuzz
fuzz: ## fuzz the envelope decoder (FuzzDecode) for FUZZTIME
	$(GO) test -run='^$$' -fuzz=FuzzDecode -fuzztime=$(FUZZTIME) ./internal/envelope/

.PHONY: chaos
chaos: services ## chaos suite (test/chaos, ~3 min, its tests in parallel; restarts PostgreSQL and the broker once each, alone), if present
	@if [ -d test/chaos ]; then \
		echo 'CHAOS_PG_RESTART=1 CHAOS_BROKER_RESTART=1 $(GO) test -race -count=1 -v -parallel 6 -run . -timeout 10m ./test/chaos/...'; \
		CHAOS_PG_RESTART=1 CHAOS_BROKER_RESTART=1 $(GO) test -race -count=1 -v -parallel 6 -run . -timeout 10m ./test/chaos/...; \
	else \
		echo 'chaos: no suite yet'; \
	fi

.PHONY: chaos-cluster
chaos-cluster: services ## chaos cluster phase: 3 extra RabbitMQ nodes (scripts/rabbitmq-cluster.sh) lost under load (~3 min)
	@bash scripts/rabbitmq-cluster.sh start
	@echo 'CHAOS_CLUSTER=1 $(GO) test -race -count=1 -v -run TestChaosBrokerCluster -timeout 10m ./test/chaos/'
	@rc=0; CHAOS_CLUSTER=1 $(GO) test -race -count=1 -v -run TestChaosBrokerCluster -timeout 10m ./test/chaos/ || rc=$$?; \
		bash scripts/rabbitmq-cluster.sh stop; exit $$rc

# chaos-all is the two chaos phases as make test runs them: the cluster's
# three nodes boot (about a minute of Erlang start-up on 2 cores) while the
# main suite runs, then the cluster phase runs alone (its faults stop and
# cut nodes that must not be starved of CPU: net_ticktime is 15 s).
.PHONY: chaos-all
chaos-all: services ## chaos, with the cluster's nodes starting beside it, then chaos-cluster
	@bash scripts/beside.sh cluster-start -- bash scripts/rabbitmq-cluster.sh start -- $(MAKE) --no-print-directory chaos || \
		{ bash scripts/rabbitmq-cluster.sh stop; exit 1; }
	@$(MAKE) --no-print-directory chaos-cluster

# The soak owns its PostgreSQL and RabbitMQ cluster (it restarts and kills
# them): scripts/soak.sh starts and removes them. Not part of `make test`.
SOAK_DURATION ?= 60m## how long `make soak`'s load and faults last
SOAK_SEED ?=## `make soak`'s random seed (empty: the clock; the run's log says it, to replay it)
SOAK_BREAK ?=## nodedup: `make soak` runs a daemon built without the dedup insert, which must fail
export SOAK_DURATION SOAK_SEED SOAK_BREAK
.PHONY: soak
soak: ## an hour (SOAK_DURATION) of random faults under load on private services: nothing lost, nothing applied twice, nothing growing (SOAK_SEED replays, SOAK_BREAK=nodedup must fail)
	@bash scripts/soak.sh

.PHONY: verify
# go vet is not run apart: golangci-lint's govet runs every analyzer of the
# go vet of our Go version (its default set is cmd/vet's list), so `vet`
# beside `lint` type-checked and analysed the whole tree twice: on an empty
# build cache 469 s of CPU for no finding lint would not make. `make vet`
# stays for a quick look without the linters. proto-verify runs beside
# lint: on an empty build cache each first builds its tool from source
# (buf about 250 s of CPU, golangci-lint about 350 s with its first run),
# and in a fresh make test verify outlasted the chaos phases beside it by
# some 200 s (585 s against 380 s), buf's build coming after lint's.
verify: ## static checks: gofmt, lint (with govet) beside proto, go mod tidy
	@$(MAKE) --no-print-directory fmt-check
	@bash scripts/beside.sh proto-verify -- $(MAKE) --no-print-directory proto-verify -- $(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory tidy-check

.PHONY: fmt-check
fmt-check: ## fail if gofmt would change a (non-generated) Go file
	@bash scripts/fmt-check.sh

.PHONY: fmt
fmt: ## format Go code (gofmt + goimports via golangci-lint fmt)
	$(GOLANGCI_LINT) fmt ./...

.PHONY: vet
vet: ## go vet ./... (and the nested modules, and the test hooks' build)
	$(GO) vet ./...
	$(GO) vet -tags platformd_testhooks ./internal/daemon/
	@for d in $(NESTED_MODULES); do (cd $$d && $(GO) vet ./...) || exit 1; done

.PHONY: lint
lint: ## golangci-lint run (pinned in tools/lint/go.mod; config .golangci.yaml; govet included), the test hooks' build and the nested modules too
	$(GOLANGCI_LINT) run ./...
	$(GOLANGCI_LINT) run --build-tags platformd_testhooks ./internal/daemon/
	@for d in $(NESTED_MODULES); do \
		(cd $$d && $(GO) tool -modfile=$(CURDIR)/$(LINT_MOD) golangci-lint run --config $(CURDIR)/.golangci.yaml ./...) || exit 1; \
	done

.PHONY: staticcheck
staticcheck: ## staticcheck alone (also part of lint)
	$(STATICCHECK) ./...

.PHONY: proto-verify
proto-verify: ## buf lint + format check, generated code up to date, no breaking change vs HEAD~1
	@bash scripts/proto.sh verify

.PHONY: tidy-check
tidy-check: ## fail if go mod tidy would change go.mod/go.sum (also the tool modules)
	$(GO) mod tidy -diff
	@for d in tools/lint tools/buf tools/buf/plugins tools/grpcurl $(NESTED_MODULES); do \
		(cd $$d && $(GO) mod tidy -diff) || { echo "tidy-check: run 'go mod tidy' in $$d"; exit 1; }; \
	done

.PHONY: generate proto
generate proto: ## buf format -w, buf lint, buf generate (api/gen)
	@bash scripts/proto.sh generate

.PHONY: breaking
breaking: ## buf breaking against BREAKING_AGAINST, branch main, or HEAD~1
	@bash scripts/proto.sh breaking

.PHONY: tenants
tenants: services ## many-tenants proof (docs/tenants.md): TENANTS services in one daemon, direct then through PgBouncer: all up in 60s, <=1.5 connections each idle, fan-out applied exactly once; needs the server to itself
	PLATFORMD_TENANTS=$(TENANTS) PLATFORMD_PGBOUNCER=1 $(GO) test -count=1 -v -run 'TestManyTenants$$|TestPoolerExactlyOnce$$' -timeout 15m ./test/tenants/

.PHONY: tenants-quorum
tenants-quorum: services ## many-tenants proof on quorum queues with three retry delays, in a vhost of its own: TENANTS+3 queues at most, fan-out and a retry through every shared delay applied once per tenant; needs the server to itself
	PLATFORMD_TENANTS=$(TENANTS) $(GO) test -count=1 -v -run 'TestManyTenantsOnQuorum$$' -timeout 15m ./test/tenants/

.PHONY: pooler
pooler: services ## database_mode: pooler through a real PgBouncer (scripts/pgbouncer.sh installs and starts it): 20 services, exactly once across its restart; archive and replay through it
	PLATFORMD_POOLER_TENANTS=20 PLATFORMD_PGBOUNCER=1 $(GO) test -race -count=1 -v -run 'TestPoolerExactlyOnce$$|TestReplayThroughPooler$$' ./test/tenants/

.PHONY: bench
bench: services ## bench program (./bench/cmd/bench BENCH_FLAGS) + Go micro-benchmarks in internal/
	@if [ -d bench/cmd/bench ]; then \
		echo '$(GO) run ./bench/cmd/bench $(BENCH_FLAGS)'; \
		$(GO) run ./bench/cmd/bench $(BENCH_FLAGS); \
	else \
		echo 'bench: no ./bench/cmd/bench yet'; \
	fi
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) ./internal/...

.PHONY: console-shots
console-shots: services ## screenshots of the console's pages at 1280 and 390 px into results/console/
	mkdir -p results/console
	CONSOLE_SHOTS=$(CURDIR)/results/console $(GO) test -count=1 -v -run '^TestConsoleShots$$' -timeout 5m ./test/console/
	@ls -1 results/console/*.png

.PHONY: image
image: ## container image, no daemon or registry: OCI layout bin/image/oci + tarball bin/image/platformd.tar (podman load)
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags='-s -w' -o bin/image/platformd ./cmd/platformd
	cd deploy/image && $(GO) run . -binary ../../bin/image/platformd -layout ../../bin/image/oci -tarball ../../bin/image/platformd.tar -tag platformd:$$(git describe --tags --always --dirty 2>/dev/null || echo dev) -version $$(git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build
build: ## build cmd/* into bin/
	$(GO) build -o bin/ ./cmd/...

.PHONY: clean
clean: ## remove bin/, results/ and test/profile leftovers
	rm -rf bin/ results/
	rm -f ./*.test ./*.out ./*.prof ./cover*
