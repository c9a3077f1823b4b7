// Package perf is the end-to-end throughput and memory harness of
// amp-kafka-bridge (performance.md targets (a) and (e)). It has tests and
// benchmarks only:
//
//   - TestThroughput builds ./cmd/bridge, runs it as a process with a
//     config file against an Amp simulator in the test process (replay
//     mode: pre-built ~10k-row Arrow batches), a private redis-server
//     and an in-process srfake registry, and one broker on the same box:
//     Apache Kafka (a private broker configured as
//     internal/testenv.StartKafkaBroker does, but with retention enforced
//     every 5 s so a run cannot fill the disk) or kfake in its own process
//     (cmd/devstack kfake, records discarded with -blackhole so a run does
//     not hold every record in RAM). A run stops when less than 10 GiB of
//     disk is left. After a warm-up it measures
//     -perf.runs windows and prints rows/s per window and their median,
//     counted from the data topic's committed offsets (ListOffsets with
//     read_committed: the last stable offset), MB/s on the wire, and the
//     CPU of the bridge, the broker and the simulator per row. With
//     -perf.profile it saves a CPU profile of the bridge (its
//     http.pprof endpoint) taken during the middle window.
//
//   - TestStreamsCost (-perf.streams-cost) runs the bridge binary with
//     1, 10 and 100 streams (-perf.stream-counts) in one process, each its
//     own query, topic and transactional producer, against the simulator,
//     kfake in its own process and a private redis-server: RSS, goroutines
//     and CPU over an idle window (-perf.idle) once every stream has
//     committed the head (kfake keeps the records here: the streams read
//     the shared control topic back), the RSS again once two garbage
//     collections (asked for through the pprof endpoint) have freed what
//     the catch-up left behind, then how evenly the streams publish blocks mined
//     for all of them at once (-perf.busy-blocks; min/max and Jain's index
//     of the per-stream rates). It writes streams_cost.json, with the cost
//     of one more idle stream, into -perf.out and saves a heap profile of
//     each process there.
//
//   - BenchmarkSourceOnly reads the simulator through the bridge's Flight
//     client (package source) alone, generating rows or replaying them.
//
//   - With -perf.peers, TestThroughput also runs the bridge's peers on
//     each Apache Kafka configuration, after the bridge and on the same
//     broker, each into a fresh topic with the same partitions: kcat
//     (idempotent and defaults) and a franz-go raw producer (idempotent,
//     and in ~100 ms transactions: TestPeerProducer, a child of the test
//     binary) producing records captured from the bridge's topic, and
//     the Amp Python SDK Kafka loader's loop reproduced in
//     testdata/amp_loader_loop.py; -perf.json writes every figure.
//
//   - TestLatency (-perf.latency) measures reorg retraction latency at
//     depth 10 and 128 and the restart time to the first new committed
//     record (clean, and after kill -9 with a transaction open). A
//     reorg's figure includes Amp (here the simulator, on the same
//     cores) delivering the replacement microbatch; it also logs the
//     figure without that wait (the bridge's "replacement complete" debug
//     line says how long it waited for Amp).
//
//   - TestTakeover (-perf.takeover) measures cluster mode's takeover with
//     -perf.takeover-members (3) bridge processes sharing
//     -perf.takeover-streams (4) streams on a private Apache Kafka broker
//     and redis-server, the simulator mining a block every 100 ms,
//     session_timeout 6s and heartbeat_interval 500ms: kill -9 of a
//     watched stream's owner to the first record of that stream from the
//     new owner's producer (another producer id or epoch) a read_committed
//     consumer receives, -perf.takeover-kills (20) times; the longest
//     pause in publishing of each stream during a rolling restart
//     (SIGTERM, restart, rejoin, next); and its peer, bare franz-go group
//     members (TestTakeoverPeerMember, children of the test binary) whose
//     partition's owner is kill -9'd, the group protocol's floor. It writes
//     -perf.takeover-json; BenchmarkTakeover runs one round of it on kfake
//     and miniredis in make test's unit pass.
//
//   - TestBenchReport (-perf.report DIR) writes BENCHMARKS.md and
//     BENCHMARKS.json from what make bench wrote into DIR, TestMemory's
//     peaks beside issue #13's 256 MiB goal and TestStreamsCost's cost per
//     idle stream (RSS at the end of the idle window and settled, CPU) beside its goals (4 MiB, 0.5% of a core) and
//     its fairness beside a perfectly fair 1, as the other figures;
//     TestBenchReportSmoke runs it on made-up parts in make test.
//
//   - TestMemory (memory_test.go) runs the bridge binary as a process
//     through each case of -perf.memory-cases and reports its peak RSS
//     (VmHWM from /proc) in a table and in -perf.out/memory.json (one
//     object per case: name, peak_rss_mib, goal_mib, blocks, tx_per_block,
//     microbatch_blocks, streams, backfill_workers, rows, seconds, broker,
//     gomemlimit, memory_limit_mib (the soft limit the bridge ran with,
//     from its go_gc_gomemlimit_bytes), load, bridge; with
//     -perf.memory-runs N, the median of N runs per case and runs_mib,
//     every run's peak): catchup (3,000 blocks of ~300
//     transactions in Amp's 1000-block microbatches, SELECT *,
//     exactly-once), slope (the same at microbatches of 100, 300, 1000 and
//     3000 blocks, with the largest peak over the smallest), backfill (1M
//     blocks, 4 workers), streams (100 streams in one process, 200 blocks
//     each) and busy-streams (the 100 streams all catching up 1000 blocks
//     at once, as after an outage). A case
//     ends when every stream has committed the head block; the records the
//     producers wrote are checked against the chain's rows. It saves heap
//     profiles of the bridge near its peak (heap-peak.pprof) and at the end
//     (heap.pprof) beside each case's config and log:
//
//     go test ./test/perf -run TestMemory -perf.memory -perf.out DIR [-perf.bridge BIN] [-perf.gomemlimit 384MiB] [-perf.memory-runs 3]
//
//     The streams case runs kfake keeping the records (a stream that
//     restarts reads the shared control topic back); the others discard
//     them (-blackhole).
//
// TestThroughput is skipped unless -perf.e2e is given, TestMemory
// unless -perf.memory is and TestTakeover unless -perf.takeover is, so `make test` never runs them; `make bench-e2e` does, after `make services` has
// installed the Kafka jars and redis-server:
//
//	make bench-e2e                                       # performance.md: 60 s warm-up, 3 × 60 s
//	make bench-e2e PERF_FLAGS='-perf.warmup 10s -perf.run 15s -perf.configs kfake/p1'
//
// A configuration is broker/pN[/backfill][/star]: broker kfake or kafka, N
// partitions of the data topic, backfill to publish the history with
// streams[].backfill (2 workers) instead of live streaming, star to query
// SELECT * (27 columns, with _block_num, so batches are cut at block
// boundaries as Amp cuts them) instead of the 15-column projection
// performance.md measures (~10k-row batches).
//
// The numbers depend on the load of the machine: the harness prints the
// load average next to them.
package perf
