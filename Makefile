# bunbox: `make demo` runs the shop example end to end, `make test` runs every test.
# Both start throwaway PostgreSQL and Redis servers on loopback (scripts/devservices.sh) and stop them after,
# also when something fails.

SHELL := /bin/bash
GO ?= go
DEV := scripts/devservices.sh
# with_services runs $(1) with the dev services up and their settings in the environment, and always stops them,
# also when they came up only in part.
# A comma inside $(call ...) arguments.
, := ,
with_services = $(DEV) up && eval "$$($(DEV) env)" && $(1); rc=$$?; $(DEV) down; exit $$rc

# golangci-lint, pinned: `make lint` installs this version into .bin/ (git-ignored) from the Go module proxy when
# .bin/golangci-lint is missing or reports another version.
LINT_VERSION := 2.15.0
LINT := $(CURDIR)/.bin/golangci-lint

.PHONY: help test test/unit test/streamoff test/pooler test/short test/race test/fault test/fuzz fuzz lint demo services/up services/down test/bench bench

help: ## list the targets
	@grep -hE '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

test: ## lint first, then every test with -race: test/unit (on pgdriver, then on pgx), test/streamoff, test/pooler, test/bench, test/fault (on the stream with each driver, then the per-row path), then each fuzz target briefly (test/fuzz)
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory test/unit
	@$(MAKE) --no-print-directory test/streamoff
	@$(MAKE) --no-print-directory test/pooler
	@$(MAKE) --no-print-directory test/bench
	@$(MAKE) --no-print-directory test/fault
	@$(MAKE) --no-print-directory test/fuzz

# The database/sql drivers under bun that test/unit runs every test with, one after the other (BUNBOX_TEST_DRIVER).
DRIVERS ?= pgdriver pgx

test/unit: ## start the services, run the unit and integration tests with -race once per driver in DRIVERS (pgdriver pgx), stop the services
	@$(DEV) tools
	@$(call with_services,for d in $(DRIVERS); do echo "== BUNBOX_TEST_DRIVER=$$d"; s=$$SECONDS; BUNBOX_TEST_DRIVER=$$d $(GO) test -race -count=1 -timeout 30m ./... || { fail=1; break; }; echo "== BUNBOX_TEST_DRIVER=$$d passed in $$((SECONDS-s))s"; done; [ -z "$$fail" ])

test/streamoff: ## start the services, run every test but the migrations' own (./migrate/, which check the schema the migrations leave) with -race on pgdriver once more, with the snapshot stream turned off after the migrations (BUNBOX_TEST_STREAM=off: the per-row path alone, as relay.DisableStream leaves an outbox), stop the services
	@$(DEV) tools
	@$(call with_services,echo "== BUNBOX_TEST_STREAM=off"; s=$$SECONDS; BUNBOX_TEST_STREAM=off $(GO) test -race -count=1 -timeout 30m $$($(GO) list ./... | grep -v '/migrate$$') && echo "== with the stream off: passed in $$((SECONDS-s))s")

# The packages whose tests test/pooler runs a second time through PgBouncer.
POOLER_PKGS ?= ./bunx/ ./relay/ ./migrate/

test/pooler: ## start the services, run the bunx, relay and migrate tests with -race through PgBouncer in transaction mode (BUNBOX_TEST_POOLER=1), once per driver in DRIVERS, stop the services
	@$(DEV) tools
	@$(call with_services,for d in $(DRIVERS); do echo "== BUNBOX_TEST_POOLER=1 BUNBOX_TEST_DRIVER=$$d"; s=$$SECONDS; BUNBOX_TEST_POOLER=1 BUNBOX_TEST_DRIVER=$$d $(GO) test -race -count=1 -timeout 30m $(POOLER_PKGS) || { fail=1; break; }; echo "== through the pooler on $$d: passed in $$((SECONDS-s))s"; done; [ -z "$$fail" ])

test/race: test ## alias of test: the race detector is always on

# The suite starts private PostgreSQL and Redis servers that it kills and restarts, so it needs no shared services;
# devservices.sh only installs redis-server when it is missing (in a directory of its own, stopped at once).
test/fault: export BUNBOX_DEV_DIR := $(CURDIR)/.dev/fault
test/fault: ## the fault-injection suite (~2.5 min): real processes SIGKILLed, Redis and PostgreSQL restarted; then TestFaultNetwork (~3-7 min: partitions, latency, resets, lost replies through a TCP proxy); FAULT_SEED=n replays a run, BUNBOX_TEST_DRIVER=pgx runs it on pgx; both run three times: on the snapshot stream (the default) on pgdriver, then on pgx, then with the stream off, the per-row path alone (FAULT_STREAM=0)
	@command -v redis-server >/dev/null || { $(DEV) up >/dev/null; $(DEV) down; }
	FAULT_RACE=$${FAULT_RACE:-1} $(GO) test -race -count=1 -tags fault -timeout 15m -v -run TestFault ./internal/faultsuite/
	BUNBOX_TEST_DRIVER=pgx FAULT_RACE=$${FAULT_RACE:-1} $(GO) test -race -count=1 -tags fault -timeout 15m -v -run TestFault ./internal/faultsuite/
	FAULT_STREAM=0 FAULT_RACE=$${FAULT_RACE:-1} $(GO) test -race -count=1 -tags fault -timeout 15m -v -run TestFault ./internal/faultsuite/

# The fuzz targets, as package:target. They need no server. Add a target here and both fuzz steps run it.
FUZZ_TARGETS := \
	model:FuzzNewEvent \
	model:FuzzValidate \
	model:FuzzDeliveryOptions \
	relay:FuzzReadRow \
	worker:FuzzInboxTask \
	connect:FuzzRedact \
	connect:FuzzRedactParsed
FUZZTIME ?= 2m
# A count, not a duration: Go 1.26's fuzz coordinator can fail a run with "context deadline exceeded" when a
# duration -fuzztime ends while a worker is mid-call (golang/go#75804, fixed in Go 1.27); a count has no deadline.
FUZZTIME_SHORT ?= 30000x
# fuzz_each runs every target of FUZZ_TARGETS for $(1); new failing inputs land in the package's testdata/fuzz.
fuzz_each = for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t\#\#*:}; echo "fuzz ./$$pkg $$fn for $(1)"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(1) ./$$pkg/ || exit 1; \
	done

test/fuzz: ## each fuzz target for FUZZTIME_SHORT (30000 executions, a few seconds), as part of make test
	@$(call fuzz_each,$(FUZZTIME_SHORT))

fuzz: ## each fuzz target for FUZZTIME (2m; e.g. make fuzz FUZZTIME=10m)
	@$(call fuzz_each,$(FUZZTIME))

test/short: ## the tests that need no server
	$(GO) test -short -race -count=1 ./...

lint: ## gofmt, then golangci-lint (.golangci.yml: errcheck, govet, staticcheck, unused, ineffassign, doc comments, import rules)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@[ "$$($(LINT) version --short 2>/dev/null)" = "$(LINT_VERSION)" ] || { echo "installing golangci-lint v$(LINT_VERSION) into .bin/"; GOBIN=$(CURDIR)/.bin $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$(LINT_VERSION); }
	$(LINT) run ./...

# bench/ is a module of its own (the peers it compares with never enter the library's go.mod): vet and build it,
# and run a smoke pass of the command with the services up. It requires the library through a replace of ../,
# so a change to the library's go.mod can leave bench/go.mod untidy: -mod=mod lets go bring it up to date.
test/bench bench: export GOFLAGS := -mod=mod
test/bench: ## vet and build the bench/ module and smoke-run bunbench (one short round of tax and drain, ~30 s)
	cd bench && $(GO) vet ./... && $(GO) build -o /dev/null ./...
	@$(call with_services,(cd bench && $(GO) run ./cmd/bunbench -quick -rounds 1 -drain-n 2000 -parts tax$(,)drain))

bench: ## start the services, run every comparison of bench/ (~15 min; BENCH_FLAGS=-quick for a smoke run), stop them
	@$(call with_services,(cd bench && $(GO) run ./cmd/bunbench $(BENCH_FLAGS)))

demo: ## start the services, run the shop example end to end, print the summary, stop the services
	@$(call with_services,$(GO) run ./example/cmd/shop demo)

services/up: ## start PostgreSQL and Redis and print their settings
	@$(DEV) up

services/down: ## stop them and delete their data
	@$(DEV) down
