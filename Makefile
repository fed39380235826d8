# floodgate — build, test and benchmark targets.
# `make test` is what CI runs (.ci/run); it installs what it needs first.

GO          ?= go
STATICCHECK_VERSION ?= v0.8.2
GOBIN       ?= $(shell $(GO) env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck
# Nested modules that have their own tests (kept out of the library's go.sum).
SUBMODULES  := $(shell find . -mindepth 2 -name go.mod -not -path './.cache/*' -exec dirname {} \; | sort)
FUZZTIME    ?= 20s
# -trimpath keeps the checkout's directory out of what the go command
# compiles, so a fresh clone (CI's) finds in the build cache (and
# staticcheck in its own) the packages a clone elsewhere compiled.
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)

.PHONY: all deps test test-fast test-race test-alloc test-system vet lint bench bench-peers bench-grpc bench-cluster rls-diff fuzz demo demo-screenshot demo-busy proto clean

all: test

## deps: install what tests need: redis-server and redis-cli (apt), staticcheck (go).
deps:
	@if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then \
		echo "installing redis-server and redis-tools"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server redis-tools >/dev/null; \
	fi
	@command -v redis-server >/dev/null && command -v redis-cli >/dev/null || { echo "make deps: redis-server/redis-cli still missing" >&2; exit 1; }
	@[ -x "$(STATICCHECK)" ] || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## test: everything CI runs: vet and staticcheck (the system tier's files
## too), the fast tier under the race detector, the allocation tests
## without it, then the system tier (CONTRIBUTING.md, "Two tiers of tests").
## One at a time: on empty caches each is compiling on both cores, and
## side by side they did not finish sooner (744 s, with other work on the
## machine, against 603-616 s one after another).
test: deps vet lint test-race test-alloc test-system

## test-fast: the fast tier, what a contributor runs while working: go test
## ./... in every module, each benchmark once. Same as `go test ./...` in
## one module.
test-fast:
	GO=$(GO) ./scripts/test.sh fast

## test-race, test-alloc, test-system run go test with -vet=off, after vet,
## which checks the same files with every analyzer (once, not again per pass).
## test-race: the fast tier under the race detector, packages side by side.
test-race: vet
	GO=$(GO) ./scripts/test.sh race

## test-alloc: the allocation tests without the race detector (under it
## sync.Pool drops items at random, so they skip), in their packages only.
test-alloc: vet
	GO=$(GO) ./scripts/test.sh alloc

## test-system: the system tier (*_system_test.go, build tag system): tests
## that measure time on real processes (fleets of processes, Redis killed
## and paused, the demo's report, overload rows, the differential test
## against envoyproxy/ratelimit), one package at a time.
test-system: deps vet
	GO=$(GO) ./scripts/test.sh system

# vet and lint build with -race (CHECKFLAGS) so that they compile every
# package once, as the race-detector tests then find it in the build cache:
# on empty caches the root module's vet, staticcheck and race test build
# take 132 s instead of 203 s. The race_off_test.go files (one constant
# each) are left out of both and compiled by test-alloc and test-fast.
CHECKFLAGS  := $(GOFLAGS) -race

vet:
	./scripts/test.sh check
	GOFLAGS="$(CHECKFLAGS)" $(GO) vet -tags system ./...
	@for m in $(SUBMODULES); do echo "go vet ($$m)"; (cd $$m && GOFLAGS="$(CHECKFLAGS)" $(GO) vet -tags system ./...) || exit 1; done

lint: deps
	STATICCHECK=$(STATICCHECK) CHECKFLAGS="$(CHECKFLAGS)" ./scripts/test.sh lint

## bench: the library's micro-benchmarks.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

## fuzz: run every fuzz target for FUZZTIME each.
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

## bench-peers: floodgate's Redis store against peer libraries on one redis-server.
bench-peers: deps
	cd bench && $(GO) run ./cmd/peers

## bench-grpc: gRPC throughput with and without the chain, memstore and Redis.
bench-grpc: deps
	cd bench && $(GO) run ./cmd/grpcload

## bench-cluster: the gRPC chain on a 3-master Redis Cluster (started by
## testing/redistest) against the standalone batched rows of the same run:
## exact 4 levels (each identity its own slot, and every level keyed first
## by the tenant: one slot per call), leased, async, 1 level, and
## redis_rate on the cluster, and the tenant-keyed chain sharded over three
## standalone servers (the cluster's control: the masters' count, no cluster),
## Redis CPU summed over the nodes and per node.
BENCH_CLUSTER = chain-redis-4-batch,chain-redis-4-tenant,chain-redis-1-batch,redis_rate-1,cluster-redis-4-batch,cluster-redis-4-tenant,cluster-redis-4-leased,cluster-redis-4-async,cluster-redis-1-batch,cluster-redis_rate-1,shards-redis-4-tenant
bench-cluster: deps
	cd bench && $(GO) run ./cmd/grpcload -only $(BENCH_CLUSTER)

## rls-diff: floodgate-rls against envoyproxy/ratelimit, answer by answer
## (bench/rls: both services on their own redis-servers, the same calls on
## the same configurations; differences by kind). `make test` runs it too,
## as bench/rls's TestDifferential in the system tier. The first run builds
## envoyproxy/ratelimit with go run, which keeps it in the go build cache.
rls-diff: deps
	cd bench/rls && $(GO) run . -diff

## demo: the in-process demo (Redis when REDIS_URL is set); it writes
## DEMO_REPORT. DEMO_ARGS adds flags: make demo DEMO_ARGS='--redis-fault kill@8s:4s'
## starts the demo's own redis-server and kills it 8s in (back 4s later).
DEMO_REPORT ?= floodgate-demo-report.html
DEMO_ARGS   ?=
demo:
	$(GO) run ./cmd/floodgate demo -report $(DEMO_REPORT) $(DEMO_ARGS)

## demo-screenshot: open the report the last `make demo` wrote in headless
## Chromium (fails on console errors) and save SCREENSHOT.
SCREENSHOT  ?= $(DEMO_REPORT:.html=.png)
demo-screenshot:
	./scripts/screenshot-report.sh $(DEMO_REPORT) $(SCREENSHOT)

## demo-busy: the demo on a healthy redis-server of its own while BUSY
## CPU-bound processes (busy loops) compete for the cores; prints the
## rate-limit decisions made without Redis, the fail-closed ones and the
## breaker's state. DEMO_ARGS as for demo (bench/README.md, "The demo
## beside CPU-bound processes").
BUSY ?= 2
demo-busy: deps
	BUSY=$(BUSY) GO=$(GO) ./scripts/demo-busy.sh -report $(DEMO_REPORT) $(DEMO_ARGS)

## proto: regenerate the Go code of proto/floodgate/v1 and internal/**/*.proto.
proto:
	./proto/generate.sh

clean:
	rm -rf .cache floodgate-demo-report.html floodgate-demo-report.png
