# amp-kafka-bridge: build, test and the local stack.
#
#   make test            everything CI runs (.ci/run): golangci-lint in the background,
#                        vet + gofmt, unit tests on the in-process fakes, then the
#                        integration pass against a real Kafka broker, redis-server and
#                        registry that it starts and always stops; then lint's verdict
#   make services        start the local stack (deploy/local/stack.sh; env in .local/stack.env)
#   make services-stop   stop it (KEEP=1 keeps the data)
#   make build | lint | pydeps
#   make bench           every published figure beside its peer on this machine (≈40–50 min;
#                        not part of make test): installs what it needs (deploy/local/stack.sh
#                        start bench python: broker jars, redis-server, kcat), runs the parts into
#                        .local/bench and writes BENCHMARKS.md and BENCHMARKS.json (test/perf).
#                        Shorter: make bench BENCH_SMOKE=1 (seconds-long windows, few samples)
#   make bench-go        every Go benchmark with its default time (go test -bench .)
#   make lint            golangci-lint (.golangci.yml; style.md H21), the pinned binary
#   make lint-ci         the unit tests with golangci-lint running beside them
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
# golangci-lint is not a module dependency: `go install pkg@version` builds the pinned
# version once (about 1.5 min on a fresh machine) into a file named after the version,
# so a version bump rebuilds it. Its cache (type information, results per package)
# stays in .local too, like the stack's downloads.
GOLANGCI_LINT := .local/bin/golangci-lint-$(GOLANGCI_LINT_VERSION)
GOLANGCI_LINT_CACHE_DIR := $(CURDIR)/.local/cache/golangci-lint
LINT_OUT := .local/lint.out
LINT_RUN = GOLANGCI_LINT_CACHE=$(GOLANGCI_LINT_CACHE_DIR) $(GOLANGCI_LINT) run ./...
# go install names the binary golangci-lint: it is built in a private GOBIN and
# renamed, so an interrupted build never leaves a half-written versioned file.
INSTALL_GOLANGCI_LINT = echo "== building golangci-lint $(GOLANGCI_LINT_VERSION) into $(GOLANGCI_LINT)" && \
	mkdir -p $(dir $(GOLANGCI_LINT)) && tmp=$$(mktemp -d .local/golangci-lint.XXXXXX) && \
	GOBIN=$(CURDIR)/$$tmp $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) && \
	mv $$tmp/golangci-lint $(GOLANGCI_LINT) && rmdir $$tmp
# Variables that point tests at real services; cleared for the unit pass.
SERVICE_VARS := BRIDGE_TEST_KAFKA_SEEDS BRIDGE_TEST_REDIS_ADDR BRIDGE_TEST_REGISTRY_URL BRIDGE_TEST_REGISTRY_HOME \
	BRIDGE_TEST_PYTHON BRIDGE_TEST_REDIS_SERVER_BIN BRIDGE_TEST_KAFKA_HOME BRIDGE_TEST_REQUIRE

.PHONY: test check unit lint-ci integration services services-stop services-status build bench bench-go bench-e2e lint pydeps clean

# golangci-lint (the build of its pinned binary when missing, then the run) starts in
# the background at a lower priority and overlaps the whole test run, most of all the
# integration pass, which waits on brokers more than it computes; its output is
# printed at the end, and either failing fails the target. set -m puts it in a
# process group of its own, which the trap ends on an interrupt.
test:
	@mkdir -p .local
	@echo "== golangci-lint $(GOLANGCI_LINT_VERSION) in the background (output: $(LINT_OUT), printed at the end)"
	@set -m; rc=0; lrc=0; start=$$SECONDS; \
	( renice -n 10 -p $$BASHPID >/dev/null; \
	  if [[ ! -x $(GOLANGCI_LINT) ]]; then $(INSTALL_GOLANGCI_LINT); fi && \
	  echo "== $(LINT_RUN)" && $(LINT_RUN) && echo "== golangci-lint done after $$((SECONDS - start)) s" ) >$(LINT_OUT) 2>&1 & lint=$$!; set +m; \
	trap 'kill -- -$$lint 2>/dev/null || true' EXIT INT TERM; \
	$(MAKE) --no-print-directory check unit integration || rc=$$?; \
	echo "== tests done after $$((SECONDS - start)) s; waiting for golangci-lint"; \
	wait $$lint || lrc=$$?; \
	echo "== golangci-lint"; cat $(LINT_OUT); \
	if [[ $$lrc -ne 0 ]]; then echo "golangci-lint failed (exit $$lrc)"; fi; \
	if [[ $$rc -ne 0 ]]; then echo "tests failed (exit $$rc)"; fi; \
	[[ $$rc -eq 0 && $$lrc -eq 0 ]]

check:
	@echo "== go vet"
	$(GO) vet ./...
	@echo "== gofmt"
	@files=$$(find . -name '*.go' -not -path './.local/*' -not -path './bin/*' -not -path './deploy/local/kafka/target/*' | xargs -r gofmt -l); \
	if [[ -n "$$files" ]]; then echo "gofmt needed on:"; echo "$$files"; exit 1; fi

# The unit pass runs the tests, then every benchmark once (-benchtime 1x) in a pass of its
# own over the packages that have benchmarks, with BRIDGE_TEST_BENCH_SMOKE=1 shrinking the
# benchmarks whose setup is long (testenv.BenchSmoke): none can rot, and make test pays
# under a minute for it. Two passes, because with -bench go test runs the packages one
# after another (cmd/go serializes benchmark runs, so that they do not disturb each
# other): in one pass the tests of every package waited for those before it (244 s
# against 115 + 54 s on 2 cores).
UNIT_ENV = env $(addprefix -u ,$(SERVICE_VARS)) BRIDGE_TEST_BENCH_SMOKE=1
BENCH_PKGS := $(shell grep -rl --include='*_test.go' --exclude-dir=.local --exclude-dir=target '^func Benchmark' . 2>/dev/null | xargs -r -n1 dirname | sort -u)
UNIT_TESTS = $(UNIT_ENV) $(GO) test -race -shuffle=on ./... && \
	echo "== benchmarks, once each" && \
	$(UNIT_ENV) $(GO) test -race -run '^$$' -bench . -benchtime 1x $(BENCH_PKGS)

unit:
	@echo "== unit tests (in-process fakes only)"
	$(UNIT_TESTS)

# The unit pass with golangci-lint beside it: the build of the pinned binary (when
# missing) and the lint run go to the background at a lower priority (nice 10), so
# the tests keep the CPU and lint fills their idle time. Its output is printed after
# the tests, and either failing fails the target. set -m puts lint in its own
# process group, which the trap ends if the tests are interrupted; set +m keeps
# bash's job notices out of the log.
lint-ci:
	@mkdir -p .local
	@echo "== golangci-lint $(GOLANGCI_LINT_VERSION) in the background (output: $(LINT_OUT), printed after the unit tests)"
	@set -m; rc=0; lrc=0; start=$$SECONDS; \
	( renice -n 10 -p $$BASHPID >/dev/null; \
	  if [[ ! -x $(GOLANGCI_LINT) ]]; then $(INSTALL_GOLANGCI_LINT); fi && \
	  echo "== $(LINT_RUN)" && $(LINT_RUN) ) >$(LINT_OUT) 2>&1 & lint=$$!; set +m; \
	trap 'kill -- -$$lint 2>/dev/null || true' EXIT INT TERM; \
	echo "== unit tests (in-process fakes only)"; \
	$(UNIT_TESTS) || rc=$$?; \
	echo "== unit tests done after $$((SECONDS - start)) s; waiting for golangci-lint"; \
	wait $$lint || lrc=$$?; \
	echo "== golangci-lint ($$((SECONDS - start)) s after the start)"; \
	cat $(LINT_OUT); \
	if [[ $$lrc -ne 0 ]]; then echo "golangci-lint failed (exit $$lrc)"; fi; \
	if [[ $$rc -ne 0 ]]; then echo "unit tests failed (exit $$rc)"; fi; \
	[[ $$rc -eq 0 && $$lrc -eq 0 ]]

# The integration pass starts the stack, runs every TestIntegration* test with the
# real services required, and always stops the stack, keeping the test's exit code.
# -timeout 25m: go test's default of 10 minutes per package is a hang detector that
# test/e2e (the kill -9 schedule, network faults) outgrows on a loaded machine.
# test/e2e comes first: go test starts packages in the order given, two at a time
# (-p, the cores), and test/e2e, the longest (~7 minutes), would otherwise start only
# after cmd/bridge's and the others ahead of it in ./... order (~2 minutes later).
integration:
	@rc=0; \
	$(MAKE) --no-print-directory services || rc=$$?; \
	if [[ $$rc -eq 0 ]]; then \
		set -a; . ./$(ENV_FILE); set +a; \
		echo "== integration tests against real services:"; \
		echo "   Apache Kafka $$BRIDGE_TEST_KAFKA_VERSION (KRaft, Maven Central jars) at $$BRIDGE_TEST_KAFKA_SEEDS"; \
		echo "   redis-server $$BRIDGE_TEST_REDIS_VERSION at $$BRIDGE_TEST_REDIS_ADDR (appendonly yes, appendfsync always)"; \
		echo "   schema registry: $$BRIDGE_TEST_REGISTRY_KIND $${BRIDGE_TEST_REGISTRY_VERSION:-} (Confluent API, compatibility enforced unless srfake) at $$BRIDGE_TEST_REGISTRY_URL"; \
		echo "   python: $$BRIDGE_TEST_PYTHON ($$BRIDGE_TEST_PYTHON_VERSIONS)"; \
		BRIDGE_TEST_REQUIRE=all $(GO) test -race -run Integration -count=1 -timeout 25m ./test/e2e $$($(GO) list ./... | grep -v '/test/e2e$$') || rc=$$?; \
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

bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# make bench: the parts go to BENCH_OUT (a part that fails does not stop the others; make
# bench fails at the end naming it), then TestBenchReport writes BENCHMARKS.md and
# BENCHMARKS.json at the repository root. Each part records the load average. The
# end-to-end part warms the broker (a franz-go transactional producer, 45 s; the broker's log is on tmpfs, see test/perf -perf.broker-log-dir), then runs the bridge and then its peers (franz-go
# transactional, kcat idempotent and default, franz-go idempotent, the Python loader's loop, then
# franz-go transactional again: BENCH_PEERS_AGAIN) on one fresh broker
# per partition count, then the bridge (resumed) and franz-go transactional take 2 more turns
# each (-perf.turns 2), then the bridge runs last, so that the figures of both, the medians of
# their 8 windows, come from the same stretch of the run in alternation and not from whichever
# ran in a slow spell of the machine; its defaults (60 s warm-up, 2 × 30 s windows, every later
# run 15 s + 2 × 30 s) give a warm JVM. The takeover part (test/perf TestTakeover) runs 3 bridge processes in cluster
# mode and kill -9s a stream's owner 20 times (≈10 min; 3 with BENCH_SMOKE=1), then a rolling
# restart, then its peer (bare franz-go group members). BENCH_SMOKE=1 runs every part for
# seconds (a check, not figures).
# The SELECT * part (star.json) runs the bridge on kfake with the 15-column query and with
# SELECT *, in turn, twice (-perf.rounds 2: the machine's drift falls on both alike), 20 s of
# warm-up and 2 × 20 s each time (≈5 min), for issue #13's SELECT * goals.
# The memory part (test/perf TestMemory, DIR/memory/memory.json) runs each case 3 times and
# reports the median peak RSS (≈6 min; the slope cases run 15,000 blocks each); the cost-per-stream part (test/perf TestStreamsCost,
# DIR/streams_cost/streams_cost.json) runs the bridge with 1, 10 and 100 idle streams, 30 s
# of idle CPU each, then 300 blocks mined for all at once (≈3 min). The read-back part (sink
# BenchmarkReadBack, ≈10 s) decodes a depth-128 reorg's fetch response as the bridge does,
# beside franz-go's decode of it alone.
BENCH_OUT := $(CURDIR)/.local/bench
ifeq ($(BENCH_SMOKE),1)
BENCH_ENCODE_FLAGS ?= -count 1 -benchtime 20x
BENCH_RECOVER_FLAGS ?= -benchtime 2x
BENCH_READBACK_FLAGS ?= -count 1 -benchtime 2x
BENCH_E2E_FLAGS ?= -perf.broker-warmup 3s -perf.warmup 5s -perf.run 5s -perf.runs 1 -perf.turns 1 -perf.peer-warmup 2s -perf.python-run 5s -perf.capture 20000
BENCH_LATENCY_FLAGS ?= -perf.reorg-samples 3 -perf.reorg-samples-deep 2 -perf.restart-samples 2
BENCH_TAKEOVER_FLAGS ?= -perf.takeover-kills 3
BENCH_MEMORY_FLAGS ?= -perf.memory-runs 1
BENCH_STREAMS_COST_FLAGS ?= -perf.stream-counts 1,10 -perf.idle 3s -perf.busy-blocks 20
BENCH_STAR_FLAGS ?= -perf.warmup 3s -perf.run 3s -perf.runs 1 -perf.rounds 2
else
BENCH_ENCODE_FLAGS ?= -count 5
BENCH_RECOVER_FLAGS ?= -benchtime 20x
BENCH_READBACK_FLAGS ?= -count 7 -benchtime 50x
BENCH_E2E_FLAGS ?= -perf.broker-warmup 45s -perf.warmup 60s -perf.run 30s -perf.runs 2 -perf.turns 2 -perf.peer-warmup 15s -perf.python-run 60s
BENCH_LATENCY_FLAGS ?= -perf.reorg-samples 100 -perf.reorg-samples-deep 20 -perf.restart-samples 10
BENCH_TAKEOVER_FLAGS ?= -perf.takeover-kills 20
BENCH_MEMORY_FLAGS ?= -perf.memory-runs 3
BENCH_STREAMS_COST_FLAGS ?= -perf.stream-counts 1,10,100 -perf.idle 30s -perf.busy-blocks 300
BENCH_STAR_FLAGS ?= -perf.warmup 20s -perf.run 20s -perf.runs 2 -perf.rounds 2
endif
BENCH_PEERS ?= franz-go-txn,kcat-idempotent,kcat-defaults,franz-go-idempotent,python-loader
BENCH_PEERS_AGAIN ?= franz-go-txn
bench:
	$(STACK) start bench python
	@set -a; . .local/bench.env; . .local/venv.env; set +a; \
	out=$(BENCH_OUT); rm -rf $$out; mkdir -p $$out; start=$$SECONDS; failed=; \
	load() { echo "load: $$(cut -d' ' -f1-3 /proc/loadavg)"; }; \
	echo "== [1/10] encoder: hot path, hamba, goavro (encode.txt)"; \
	{ load; $(GO) test -run '^$$' -bench Encode -benchmem -cpu 1 $(BENCH_ENCODE_FLAGS) ./encode/; load; } | tee $$out/encode.txt || failed+=" encoder"; \
	echo "== [2/10] Redis-less start over 100,000 control events (recover.txt)"; \
	{ load; $(GO) test -run '^$$' -bench 'RecoverRedisLess/kafka/events=100000' $(BENCH_RECOVER_FLAGS) ./internal/pipeline/; load; } | tee $$out/recover.txt || failed+=" recovery"; \
	echo "== [3/10] decoding a depth-128 reorg's read back beside franz-go's decode (readback.txt)"; \
	{ load; $(GO) test -run '^$$' -bench 'ReadBack' -benchmem $(BENCH_READBACK_FLAGS) ./sink/; load; } | tee $$out/readback.txt || failed+=" read-back"; \
	echo "== [4/10] memory: peak RSS through a catch-up, the microbatch slope, a backfill, 100 streams of 200 and of 1000 blocks each (memory/memory.json)"; \
	mkdir -p $$out/memory; \
	$(GO) test -run '^TestMemory$$' -count=1 -v -timeout 1h ./test/perf/ -perf.memory -perf.out $$out/memory $(BENCH_MEMORY_FLAGS) || failed+=" memory"; \
	echo "== [5/10] cost per stream: RSS and idle CPU with 1, 10, 100 streams, fairness (streams_cost/streams_cost.json)"; \
	mkdir -p $$out/streams_cost; \
	$(GO) test -run '^TestStreamsCost$$' -count=1 -v -timeout 1h ./test/perf/ -perf.streams-cost -perf.out $$out/streams_cost $(BENCH_STREAMS_COST_FLAGS) || failed+=" streams-cost"; \
	echo "== [6/10] end to end on Apache Kafka: the bridge and its peers (e2e.json)"; \
	$(GO) test -run '^TestThroughput$$' -count=1 -v -timeout 2h ./test/perf/ -perf.e2e -perf.configs kafka/p1,kafka/p6 \
		-perf.peers $(BENCH_PEERS) -perf.peers-again '$(BENCH_PEERS_AGAIN)' -perf.out $$out/e2e -perf.json $$out/e2e.json $(BENCH_E2E_FLAGS) || failed+=" end-to-end"; \
	echo "== [7/10] SELECT * beside the 15-column query on kfake (star.json)"; \
	$(GO) test -run '^TestThroughput$$' -count=1 -v -timeout 1h ./test/perf/ -perf.e2e -perf.configs kfake/p1,kfake/p1/star \
		-perf.peers '' -perf.out $$out/star -perf.json $$out/star.json $(BENCH_STAR_FLAGS) || failed+=" select-star"; \
	echo "== [8/10] reorg and restart latency (latency.json)"; \
	$(GO) test -run '^TestLatency$$' -count=1 -v -timeout 1h ./test/perf/ -perf.latency -perf.out $$out \
		-perf.latency-json $$out/latency.json $(BENCH_LATENCY_FLAGS) || failed+=" latency"; \
	echo "== [9/10] cluster mode: takeover after kill -9, rolling restart, the bare franz-go group failover (takeover.json)"; \
	$(GO) test -run '^TestTakeover$$' -count=1 -v -timeout 1h ./test/perf/ -perf.takeover -perf.out $$out \
		-perf.takeover-json $$out/takeover.json $(BENCH_TAKEOVER_FLAGS) || failed+=" takeover"; \
	echo "== [10/10] report"; \
	$(GO) test -run '^TestBenchReport$$' -count=1 -v ./test/perf/ -perf.report $$out \
		-perf.report-md $(CURDIR)/BENCHMARKS.md -perf.report-json $(CURDIR)/BENCHMARKS.json; \
	echo "== make bench done in $$((SECONDS - start)) s: BENCHMARKS.md, BENCHMARKS.json (parts, logs and profiles in $$out)"; \
	if [[ -n "$$failed" ]]; then echo "make bench: these parts failed (the report names what is missing):$$failed"; exit 1; fi

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

lint: $(GOLANGCI_LINT)
	$(LINT_RUN)

$(GOLANGCI_LINT):
	@$(INSTALL_GOLANGCI_LINT)

clean:
	$(STACK) stop
	rm -rf bin
