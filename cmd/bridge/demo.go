package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// demoOptions are bridge demo's flags.
type demoOptions struct {
	duration   time.Duration
	blockEvery time.Duration
	reorgEvery int
	reorgDepth int
	txPerBlock int
	verbose    bool
}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var o demoOptions
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "how long to publish before verifying")
	fs.DurationVar(&o.blockEvery, "block-interval", 500*time.Millisecond, "simulated block time")
	fs.IntVar(&o.reorgEvery, "reorg-every", 6, "every N-th block is a reorg (0: never)")
	fs.IntVar(&o.reorgDepth, "reorg-depth", 2, "depth of the simulated reorgs in blocks")
	fs.IntVar(&o.txPerBlock, "tx-per-block", 20, "mean transactions per simulated block")
	fs.BoolVar(&o.verbose, "v", false, "log the bridge's own logs to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.duration <= 0 || o.blockEvery <= 0 || o.reorgEvery < 0 || o.reorgDepth < 1 || o.txPerBlock < 1 {
		return fmt.Errorf("demo: -duration and -block-interval must be positive, -reorg-every >= 0, -reorg-depth and -tx-per-block >= 1: %w", errUsage)
	}
	return runDemo(ctx, o, stdout, stderr)
}

// runDemo starts everything in-process (the Amp simulator, kfake, miniredis,
// srfake), publishes one stream of transactions while the simulated chain
// produces blocks and reorgs, then stops and verifies the topic.
func runDemo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) error {
	logLevel := slog.LevelWarn
	if o.verbose {
		logLevel = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))

	sim, err := ampsim.New(ampsim.Config{
		NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 10, TxPerBlock: o.txPerBlock, LogsPerTx: 1},
		BlockInterval: o.blockEvery, ReorgEvery: o.reorgEvery, ReorgDepth: o.reorgDepth,
	})
	if err != nil {
		return fmt.Errorf("demo: creating the Amp simulator: %w", err)
	}
	if err := sim.Start(ctx); err != nil {
		return fmt.Errorf("demo: starting the Amp simulator: %w", err)
	}
	defer sim.Close()

	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		return fmt.Errorf("demo: starting in-process Kafka: %w", err)
	}
	defer kc.Close()
	mr, err := miniredis.Run()
	if err != nil {
		return fmt.Errorf("demo: starting in-process Redis: %w", err)
	}
	defer mr.Close()
	reg := srfake.New()
	defer reg.Close()

	cfg := &Config{
		Amp:        AmpConfig{Addr: sim.Addr()},
		Kafka:      KafkaConfig{Brokers: kc.ListenAddrs(), ReplicationFactor: 1},
		Registry:   RegistryConfig{URL: reg.URL()},
		Checkpoint: CheckpointConfig{Store: "redis", Redis: RedisConfig{Addr: mr.Addr()}},
		Streams: []StreamConfig{{ID: "demo", SQL: "SELECT * FROM eth_rpc.transactions SETTINGS stream = true",
			Topic: "amp.demo.transactions", RetentionBlocks: 64}},
	}
	cfg.defaults()
	cfg.HTTP.Addr = ""
	if err := cfg.Validate(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "amp-kafka-bridge demo %s\n", buildVersion())
	fmt.Fprintf(stdout, "  Amp simulator  %s  (a block every %s, a %d-block reorg every %d blocks)\n", sim.Addr(), o.blockEvery, o.reorgDepth, o.reorgEvery)
	fmt.Fprintf(stdout, "  Kafka (kfake)  %s   Redis (miniredis) %s   registry (srfake) %s\n", strings.Join(kc.ListenAddrs(), ","), mr.Addr(), reg.URL())
	fmt.Fprintf(stdout, "  stream demo: %q -> topic %s\n\n", cfg.Streams[0].SQL, cfg.Streams[0].Topic)

	b, err := newBridge(ctx, cfg, log, nil)
	if err != nil {
		return err
	}
	defer b.close()
	var mu sync.Mutex
	var commits, rows, retracted, reorgs int
	b.events = func(e streamEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case "commit":
			commits++
			rows += e.Rows
			fmt.Fprintf(stdout, "publish  %-16s blocks %-14s %4d rows\n", e.BatchID, rangeText(e.Ranges), e.Rows)
		case "retract":
			retracted += e.Rows
			fmt.Fprintf(stdout, "retract  %-16s blocks %-14s %4d rows\n", e.BatchID, rangeText(e.Ranges), e.Rows)
		case "reorg":
			reorgs++
			fmt.Fprintf(stdout, "reorg    %s\n", e.Detail)
		case "reconnect":
			fmt.Fprintf(stdout, "reconnect (%s)\n", e.Detail)
		}
	}
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	if err := b.run(runCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("demo: running the bridge: %w", err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	mu.Lock()
	fmt.Fprintf(stdout, "\nstopped after %s: %d batches published (%d rows), %d reorgs, %d rows retracted\n\n",
		o.duration, commits, rows, reorgs, retracted)
	mu.Unlock()
	return b.verify(ctx, "demo", stdout)
}

func rangeText(rs []reorg.BlockRange) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		if r.Start == r.End {
			parts[i] = fmt.Sprint(r.Start)
		} else {
			parts[i] = fmt.Sprintf("%d..=%d", r.Start, r.End)
		}
	}
	return strings.Join(parts, ",")
}
