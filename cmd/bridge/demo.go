package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/liblog"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/ops"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
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
	liblog.Use(log)

	sim, err := ampsim.New(ampsim.Config{
		NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 10, TxPerBlock: o.txPerBlock, LogsPerTx: 1},
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

	cfg := &config.Config{
		Amp:        config.AmpConfig{Addr: sim.Addr()},
		Kafka:      config.KafkaConfig{Brokers: kc.ListenAddrs(), ReplicationFactor: 1},
		Registry:   config.RegistryConfig{URL: reg.URL()},
		Checkpoint: config.CheckpointConfig{Store: "redis", Redis: config.RedisConfig{Addr: mr.Addr()}},
		Streams: []config.StreamConfig{{ID: "demo", SQL: "SELECT * FROM eth_rpc.transactions SETTINGS stream = true",
			Topic: "amp.demo.transactions", RetentionBlocks: 64}},
	}
	cfg.Defaults()
	cfg.HTTP.Addr = "off"
	if err := cfg.Validate(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "amp-kafka-bridge demo %s\n", buildVersion())
	fmt.Fprintf(stdout, "  Amp simulator  %s  (a block every %s, a %d-block reorg every %d blocks)\n", sim.Addr(), o.blockEvery, o.reorgDepth, o.reorgEvery)
	fmt.Fprintf(stdout, "  Kafka (kfake)  %s   Redis (miniredis) %s   registry (srfake) %s\n", strings.Join(kc.ListenAddrs(), ","), mr.Addr(), reg.URL())
	fmt.Fprintf(stdout, "  stream demo: %q -> topic %s\n\n", cfg.Streams[0].SQL, cfg.Streams[0].Topic)

	b, err := newBridge(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer b.close()
	var mu sync.Mutex
	var commits, rows, retracted, reorgs int
	b.events = func(e pipeline.Event) {
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
	var lastBlock uint64
	b.events = withLastBlock(b.events, &mu, &lastBlock)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.run(runCtx) }()

	// Drive the chain: a block every blockEvery, every reorgEvery-th a
	// reorg, for the demo's duration; then let the bridge catch up with the
	// head, so that verify compares a settled chain.
	// On a terminal, a summary line every few seconds.
	summaryDone := make(chan struct{})
	if isTerminal(stdout) {
		began := time.Now()
		t := time.NewTicker(3 * time.Second)
		go func() {
			defer t.Stop()
			for {
				select {
				case <-summaryDone:
					return
				case <-t.C:
					head, _ := sim.Head()
					mu.Lock()
					fmt.Fprintf(stdout, "-- %s: %d batches (%d rows) published, %d reorgs, %d rows retracted; chain head %d, committed %d\n",
						time.Since(began).Round(time.Second), commits, rows, reorgs, retracted, head, lastBlock)
					mu.Unlock()
				}
			}
		}()
	}
	err = driveChain(ctx, sim, o, done)
	close(summaryDone)
	if err != nil {
		return err
	}
	head, _ := sim.Head()
	caughtUp := time.NewTimer(30 * time.Second)
	defer caughtUp.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		mu.Lock()
		at := lastBlock
		mu.Unlock()
		if at >= head {
			break
		}
		select {
		case err := <-done:
			return fmt.Errorf("demo: the bridge stopped early: %w", err)
		case <-caughtUp.C:
			fmt.Fprintf(stdout, "\nthe bridge did not reach head block %d within 30s (at %d)\n", head, at)
			break wait
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	cancel()
	if err := <-done; err != nil {
		return fmt.Errorf("demo: running the bridge: %w", err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	mu.Lock()
	fmt.Fprintf(stdout, "\nstopped after %s: %d batches published (%d rows), %d reorgs, %d rows retracted\n\n",
		o.duration, commits, rows, reorgs, retracted)
	mu.Unlock()
	b.verifyWait = time.Second // the simulated chain has stopped: nothing newer will come
	reps, err := b.verify(ctx, "demo")
	for _, rep := range reps {
		ops.WriteVerifyReport(stdout, rep)
	}
	return err
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

// withLastBlock wraps an event printer to also record the last committed
// block.
func withLastBlock(next func(pipeline.Event), mu *sync.Mutex, last *uint64) func(pipeline.Event) {
	return func(e pipeline.Event) {
		next(e)
		if e.Kind != "commit" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range e.Ranges {
			*last = r.End
		}
	}
}

// driveChain mines a block every o.blockEvery and makes every
// o.reorgEvery-th one a reorg of o.reorgDepth blocks, for o.duration.
func driveChain(ctx context.Context, sim *ampsim.Server, o demoOptions, done <-chan error) error {
	t := time.NewTicker(o.blockEvery)
	defer t.Stop()
	end := time.NewTimer(o.duration)
	defer end.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-done:
			return fmt.Errorf("demo: the bridge stopped early: %w", err)
		case <-end.C:
			return nil
		case <-t.C:
			if o.reorgEvery > 0 && n%o.reorgEvery == 0 {
				if err := sim.Reorg(o.reorgDepth, o.reorgDepth+1); err != nil {
					return fmt.Errorf("demo: simulating a reorg: %w", err)
				}
				continue
			}
			sim.Mine(1)
		}
	}
}

// isTerminal reports whether w is a terminal (the demo then adds live
// summary lines; piped output stays plain).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
