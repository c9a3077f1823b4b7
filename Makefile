# amp-kafka-bridge: build, test and the local stack.
#
#   make test            everything CI runs (.ci/run): vet + gofmt, unit tests on the
#                        in-process fakes, then the integration pass against a real Kafka
#                        broker, redis-server and registry that it starts and always stops
#   make services        start the local stack (deploy/local/stack.sh; env in .local/stack.env)
#   make services-stop   stop it (KEEP=1 keeps the data)
#   make build | bench | lint | pydeps
#   make bench-e2e       end-to-end throughput of the real bridge process against Apache
#                        Kafka and kfake (test/perf; minutes; not part of make test);
#                        PERF_FLAGS='-perf.warmup 10s -perf.run 15s -perf.configs kfake/p1'

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test

GO ?= go
STACK := deploy/local/stack.sh
ENV_FILE := .local/stack.env
GOLANGCI_LINT_VERSION := v2.15.0
# Variables that point tests at real services; cleared for the unit pass.
SERVICE_VARS := BRIDGE_TEST_KAFKA_SEEDS BRIDGE_TEST_REDIS_ADDR BRIDGE_TEST_REGISTRY_URL \
	BRIDGE_TEST_PYTHON BRIDGE_TEST_REDIS_SERVER_BIN BRIDGE_TEST_KAFKA_HOME BRIDGE_TEST_REQUIRE

.PHONY: test check unit integration services services-stop services-status build bench bench-e2e lint pydeps clean

test: check unit integration

check:
	@echo "== go vet"
	$(GO) vet ./...
	@echo "== gofmt"
	@files=$$(find . -name '*.go' -not -path './.local/*' -not -path './bin/*' -not -path './deploy/local/kafka/target/*' | xargs -r gofmt -l); \
	if [[ -n "$$files" ]]; then echo "gofmt needed on:"; echo "$$files"; exit 1; fi

unit:
	@echo "== unit tests (in-process fakes only)"
	env $(addprefix -u ,$(SERVICE_VARS)) $(GO) test -race -shuffle=on ./...

# The integration pass starts the stack, runs every TestIntegration* test with the
# real services required, and always stops the stack, keeping the test's exit code.
integration:
	@rc=0; \
	$(MAKE) --no-print-directory services || rc=$$?; \
	if [[ $$rc -eq 0 ]]; then \
		set -a; . ./$(ENV_FILE); set +a; \
		echo "== integration tests against real services:"; \
		echo "   Apache Kafka $$BRIDGE_TEST_KAFKA_VERSION (KRaft, Maven Central jars) at $$BRIDGE_TEST_KAFKA_SEEDS"; \
		echo "   redis-server $$BRIDGE_TEST_REDIS_VERSION at $$BRIDGE_TEST_REDIS_ADDR (appendonly yes, appendfsync always)"; \
		echo "   schema registry: $$BRIDGE_TEST_REGISTRY_KIND (franz-go sr/srfake via cmd/devstack) at $$BRIDGE_TEST_REGISTRY_URL"; \
		echo "   python: $$BRIDGE_TEST_PYTHON ($$BRIDGE_TEST_PYTHON_VERSIONS)"; \
		BRIDGE_TEST_REQUIRE=all $(GO) test -race -run Integration -count=1 ./... || rc=$$?; \
	fi; \
	$(MAKE) --no-print-directory services-stop || true; \
	exit $$rc

services:
	$(STACK) start

services-stop:
	$(STACK) stop

services-status:
	$(STACK) status

pydeps:
	$(STACK) start python

build:
	@if [[ -d cmd/bridge ]]; then \
		mkdir -p bin && $(GO) build -o bin/bridge ./cmd/bridge && echo "built bin/bridge"; \
	else \
		echo "cmd/bridge does not exist yet: nothing to build"; \
	fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# performance.md target (a): builds ./cmd/bridge and runs it as a process against a
# private Apache Kafka broker and kfake in its own process, 60 s warm-up then the
# median of 3 × 60 s per configuration; logs, configs and CPU profiles go to
# .local/perf. Needs the Kafka jars and redis-server that `make services` installs.
PERF_FLAGS ?=
bench-e2e:
	@if [[ -f $(ENV_FILE) ]]; then set -a; . ./$(ENV_FILE); set +a; \
	else echo "$(ENV_FILE) is missing: run make services first (Apache Kafka runs are skipped without it)"; fi; \
	$(GO) test -run '^TestThroughput$$' -count=1 -v -timeout 3h ./test/perf/ \
		-perf.e2e -perf.out $(CURDIR)/.local/perf $(PERF_FLAGS)

# golangci-lint is not a module dependency: go run builds the pinned version.
lint:
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

clean:
	$(STACK) stop
	rm -rf bin
