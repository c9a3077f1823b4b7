package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ampsim:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ampsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		addr       = fs.String("addr", "127.0.0.1:1602", "listen address (host:port; port 0 picks a free one)")
		network    = fs.String("network", ampsim.DefaultNetwork, "network id sent in block ranges and expected in amp-resume")
		dataset    = fs.String("dataset", ampsim.DefaultDataset, "dataset name used in SQL (dataset.table)")
		first      = fs.Uint64("first-block", 0, "number of the earliest synced block")
		blocks     = fs.Int("blocks", 100, "blocks synced at start (0 = empty dataset)")
		txPerBlock = fs.Int("tx-per-block", ampsim.DefaultTxPerBlock, "mean transactions per block (negative = none)")
		logsPerTx  = fs.Int("logs-per-tx", ampsim.DefaultLogsPerTx, "mean logs per transaction (negative = none)")
		interval   = fs.Duration("block-interval", 12*time.Second, "mine a block this often (0 = never)")
		reorgEvery = fs.Int("reorg-every", 0, "make every N-th mined block a reorg (0 = never)")
		reorgDepth = fs.Int("reorg-depth", 1, "depth of timer reorgs")
		keepAlive  = fs.String("keep-alive", ampsim.KeepAlivePerMicrobatch.String(), "keep-alive policy: per-microbatch, periodic-from-start or off")
		kaInterval = fs.Duration("keep-alive-interval", ampsim.DefaultKeepAliveInterval, "keep-alive interval (the real server uses >= 30s)")
		maxMB      = fs.Uint64("max-microbatch", ampsim.DefaultMaxMicrobatchBlocks, "server_microbatch_max_interval in blocks")
		mbDelay    = fs.Duration("microbatch-delay", 0, "simulated execution time of every streaming microbatch")
		unsynced   = fs.String("unsynced-tables", "", "comma-separated tables with no synced data (e.g. logs)")
		dict       = fs.Bool("dictionary-strings", false, "send Utf8 columns dictionary-encoded")
		replay     = fs.Int("replay-blocks", 0, "replay the transactions and logs rows of this many template blocks instead of generating every block (cheap per row, for throughput runs; 0 = generate)")
		batchRows  = fs.Int("batch-rows", ampsim.DefaultBatchRows, "rows per record batch (DataFusion's batch size)")
		tlsCert    = fs.String("tls-cert", "", "serve TLS with this PEM certificate (with -tls-key)")
		tlsKey     = fs.String("tls-key", "", "PEM private key of -tls-cert")
		verbose    = fs.Bool("v", false, "log requests to stderr")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	policy, err := ampsim.ParseKeepAlivePolicy(*keepAlive)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg := ampsim.Config{
		Addr: *addr,
		NetworkConfig: ampsim.NetworkConfig{
			Network: *network, Dataset: *dataset, FirstBlock: *first, InitialBlocks: *blocks,
			TxPerBlock: *txPerBlock, LogsPerTx: *logsPerTx,
		},
		MaxMicrobatchBlocks: *maxMB,
		KeepAlive:           policy,
		KeepAliveInterval:   *kaInterval,
		MicrobatchDelay:     *mbDelay,
		BlockInterval:       *interval,
		ReorgEvery:          *reorgEvery,
		ReorgDepth:          *reorgDepth,
		DictionaryStrings:   *dict,
		ReplayBlocks:        *replay,
		BatchRows:           *batchRows,
		TLSCertFile:         *tlsCert,
		TLSKeyFile:          *tlsKey,
		// A secret is not a flag: flags show in ps.
		Token:  os.Getenv("AMPSIM_TOKEN"),
		Logger: logger,
		OnRequest: func(ri ampsim.RequestInfo) {
			logger.Debug("request", "method", ri.Method, "sql", ri.SQL, "streaming", ri.Streaming, "cursor", ri.Cursor)
		},
	}
	if *unsynced != "" {
		cfg.UnsyncedTables = strings.Split(*unsynced, ",")
	}
	srv, err := ampsim.New(cfg)
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ampsim listening on %s (network %s, dataset %s)\n", srv.Addr(), *network, *dataset)
	<-ctx.Done()
	return srv.Close()
}
