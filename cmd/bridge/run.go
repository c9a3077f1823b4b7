package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/health"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/liblog"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// bridge is the shared components of a bridge process, each built only
// when the command needs it.
type bridge struct {
	cfg     *config.Config
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *pipeline.Metrics
	// slabs is the encoded records' memory kept for reuse, shared by the
	// streams.
	slabs *pipeline.SlabCache
	amp   *source.Client
	// ampMetrics is amp, for the metrics that /metrics may read while
	// connect sets it.
	ampMetrics atomic.Pointer[source.Client]
	kafka      sink.Config
	admin      *sink.Admin
	store      pipeline.Store
	closers    []func()
	registry   *encode.Registry
	control    *offsets.ControlCodec
	health     *health.Tracker
	// regClient is the registry's client, for its probe.
	regClient *sr.Client
	// wait, when set, retries connecting to each service with backoff
	// until it answers or startup_timeout passes (bridge run).
	wait   bool
	events func(pipeline.Event)
	// verifyWait bounds verify's canonical-chain check (default 3s).
	verifyWait time.Duration
	// progressBar receives the backfill progress bar (stderr, when it is a
	// terminal and the log is text); nil logs progress lines.
	progressBar io.Writer
	// fullEvery overrides how often a watermark carries the checkpoint
	// (tests; 0 is the pipeline's default).
	fullEvery int
	// clusterCrashed, when set and true as a cluster member's run ends,
	// stops the member without leaving its group, as a crashed process
	// (tests: cluster.Deps.Crashed).
	clusterCrashed func() bool
}

// need says which services a command connects to.
type need uint8

const (
	needAmp need = 1 << iota
	needKafka
	needStore
	needRegistry
	needAll = needAmp | needKafka | needStore | needRegistry
)

func newLogger(cfg config.LogConfig, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// newBridge connects every shared component, the checkpoint store as the
// config says.
func newBridge(ctx context.Context, cfg *config.Config, log *slog.Logger) (*bridge, error) {
	return connect(ctx, cfg, log, needAll)
}

// connect builds the components a command needs.
func connect(ctx context.Context, cfg *config.Config, log *slog.Logger, needs need) (*bridge, error) {
	b := newBridgeShell(cfg, log)
	if err := b.connect(ctx, needs); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// readBudgetGauges are the metrics of the Amp client's read budget
// (amp.read_ahead_bytes): what the streams hold of it, and its size; 0
// until b has an Amp client.
func readBudgetGauges(b *bridge) []prometheus.Collector {
	stat := func(f func(source.ReadBudgetStats) int64) func() float64 {
		return func() float64 {
			amp := b.ampMetrics.Load()
			if amp == nil {
				return 0
			}
			return float64(f(amp.ReadBudgetStats()))
		}
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "amp_bridge", Name: "amp_read_held_bytes",
			Help: "Bytes of Amp's messages that the streams hold, from before they are received until their rows are encoded (at most amp.read_ahead_bytes, plus a message larger than all of it and amp_bridge_amp_read_unsized_bytes_total's messages while they are held)."},
			stat(func(s source.ReadBudgetStats) int64 { return s.Held })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "amp_bridge", Name: "amp_read_budget_bytes",
			Help: "amp.read_ahead_bytes: the bound of amp_bridge_amp_read_held_bytes (0: none)."},
			stat(func(s source.ReadBudgetStats) int64 { return s.Limit })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "amp_bridge", Name: "amp_read_unsized_bytes_total",
			Help: "Bytes of Amp's messages counted only once they were in, their length not known before they were received (a stream that had ended, or a connection whose HTTP/2 frames the bridge could not follow)."},
			stat(func(s source.ReadBudgetStats) int64 { return s.Unsized })),
	}
}

// newBridgeShell builds what connects to nothing: the metrics registry,
// the health tracker, the control codec.
func newBridgeShell(cfg *config.Config, log *slog.Logger) *bridge {
	b := &bridge{cfg: cfg, log: log, reg: prometheus.NewRegistry(), kafka: cfg.Sink()}
	b.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b.metrics = pipeline.NewMetrics(b.reg)
	b.slabs = pipeline.NewSlabCache(b.kafka.MaxBufferedBytes)
	b.reg.MustRegister(readBudgetGauges(b)...)
	b.health = health.New(health.Config{ReadyAfter: cfg.HTTP.ReadyTimeout, LiveAfter: cfg.HTTP.LiveTimeout,
		ProbeInterval: cfg.HTTP.ProbeInterval}, b.reg, log.With("component", "health"), time.Now)
	for _, sc := range cfg.Streams {
		b.health.Stream(sc.ID)
	}
	return b
}

// connect connects the services needs names; with b.wait set each is
// retried (waitFor) until it answers.
func (b *bridge) connect(ctx context.Context, needs need) error {
	cfg, log := b.cfg, b.log
	var err error
	if b.control, err = offsets.NewControlCodec(); err != nil {
		return err
	}
	if needs&needAmp != 0 {
		// The client connects lazily: the streams wait for Amp themselves.
		if b.amp, err = source.New(cfg.Source(), source.Deps{Logger: log.With("component", "source")}); err != nil {
			return fmt.Errorf("configuring the Amp client: %w", err)
		}
		b.closers = append(b.closers, func() { _ = b.amp.Close() })
		b.ampMetrics.Store(b.amp)
	}
	if needs&needKafka != 0 {
		// One batch compressor for every producer of the process, not one
		// per stream (an idle zstd encoder is ~1.7 MiB).
		if b.kafka, err = b.kafka.ShareCompression(); err != nil {
			return err
		}
		// client=admin: the Admin's franz-go lines are every stream's (the
		// streams' own lines go through Admin.WithLogger).
		sdeps := sink.Deps{Logger: log.With("component", "sink", "client", "admin"), Registerer: b.reg}
		err := b.waitFor(ctx, pipeline.KafkaService(b.kafka.Brokers), func(ctx context.Context) error {
			a, err := sink.NewAdmin(ctx, b.kafka, sdeps)
			if err != nil {
				return err
			}
			b.admin = a
			return nil
		}, pipeline.Permanent) // a refused password, certificate or mechanism does not fix itself
		if err != nil {
			return fmt.Errorf("connecting to Kafka: %w", pipeline.NoAnswer(pipeline.KafkaService(b.kafka.Brokers), err))
		}
		b.closers = append(b.closers, b.admin.Close)
	}
	if needs&needStore != 0 {
		if err := b.openStore(ctx); err != nil {
			return err
		}
	}
	if needs&needRegistry != 0 {
		if err := b.openRegistry(ctx); err != nil {
			return err
		}
	}
	return nil
}

// waitFor calls open once, or, when b.wait is set (bridge run), until it
// succeeds (health.Tracker.Wait, backoff amp.reconnect_min to
// amp.reconnect_max, startup_timeout) or fails with an error permanent
// reports (nil: none is).
func (b *bridge) waitFor(ctx context.Context, service string, open func(context.Context) error, permanent func(error) bool) error {
	if !b.wait {
		return open(ctx)
	}
	return b.health.Wait(ctx, health.Wait{Service: service, Min: b.cfg.Amp.ReconnectMin, Max: b.cfg.Amp.ReconnectMax,
		Timeout: b.cfg.StartupTimeout, TimeoutKey: "startup_timeout", Permanent: permanent}, open)
}

// openStore opens the checkpoint store the config names.
func (b *bridge) openStore(ctx context.Context) error {
	cfg, log := b.cfg, b.log
	switch cfg.Checkpoint.Store {
	case config.StoreFile:
		fs, err := offsets.NewFileStore(cfg.Checkpoint.Dir, log.With("component", "offsets"))
		if err != nil {
			return fmt.Errorf("opening the checkpoint directory: %w", err)
		}
		b.store = fs
	case config.StoreRedis:
		var rs *offsets.RedisStore
		err := b.waitFor(ctx, "the checkpoint store, redis at "+cfg.Checkpoint.Redis.Addr, func(ctx context.Context) error {
			var err error
			rs, err = offsets.NewRedisStore(ctx, cfg.Redis(), log.With("component", "offsets"))
			return err
		}, pipeline.Permanent) // a wrong password or certificate does not fix itself
		if err != nil {
			return fmt.Errorf("connecting to the Redis checkpoint store: %w",
				pipeline.NoAnswer("checkpoint store redis at "+cfg.Checkpoint.Redis.Addr, err))
		}
		b.store = rs
		b.closers = append(b.closers, func() { _ = rs.Close() })
	}
	return nil
}

// openRegistry configures the schema registry client, if the config names
// a registry.
func (b *bridge) openRegistry(ctx context.Context) error {
	cfg := b.cfg
	if cfg.Registry.URL != "" {
		rc := cfg.SchemaRegistry()
		cl, err := encode.NewRegistryClient(rc)
		if err != nil {
			return fmt.Errorf("configuring the schema registry client: %w", err)
		}
		b.registry = encode.NewRegistry(cl, encode.WithRegistryConfig(rc), encode.WithRegistryLogger(b.log.With("component", "registry")))
		b.regClient = cl
		if b.wait {
			// Wait for it at start: every stream registers its schemas first.
			// Refused credentials or certificates do not fix themselves.
			if err := b.waitFor(ctx, "the registry at "+cfg.Registry.URL, b.pingRegistry, pipeline.Permanent); err != nil {
				return err
			}
		}
	}
	return nil
}

// pingRegistry lists the registry's subjects.
func (b *bridge) pingRegistry(ctx context.Context) error {
	return b.registry.Ping(ctx)
}

// probes are the health probes of the shared services a run uses.
func (b *bridge) probes() []health.Probe {
	var ps []health.Probe
	if b.admin != nil {
		ps = append(ps, health.Probe{Name: "kafka at " + strings.Join(b.cfg.Kafka.Brokers, ","), Check: b.admin.Ping})
	}
	if rs, ok := b.store.(*offsets.RedisStore); ok {
		ps = append(ps, health.Probe{Name: "checkpoint store, redis at " + b.cfg.Checkpoint.Redis.Addr, Check: rs.Ping})
	}
	if b.regClient != nil {
		ps = append(ps, health.Probe{Name: "registry at " + b.cfg.Registry.URL, Check: b.pingRegistry})
	}
	return ps
}

func (b *bridge) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
	b.closers = nil
}

// deps are the pipeline's dependencies of stream id.
func (b *bridge) deps(id string) pipeline.Deps {
	return pipeline.Deps{Health: b.health.Stream(id), StoreTimeout: b.cfg.Checkpoint.Timeout,
		Logger: b.log, Metrics: b.metrics, Slabs: b.slabs, Registerer: b.reg, Amp: b.amp, Kafka: b.kafka, Admin: b.admin,
		Store: b.store, Registry: b.registry, Control: b.control, ControlTopic: b.cfg.Kafka.ControlTopic,
		ReplicationFactor: b.cfg.Kafka.ReplicationFactor, Version: buildVersion(), Now: time.Now,
		RestartMin: b.cfg.Amp.ReconnectMin, RestartMax: b.cfg.Amp.ReconnectMax, Events: b.events,
		Heads: func(ctx context.Context, sql string, opts ...source.StreamOption) (map[string]uint64, error) {
			return pipeline.SyncedHeads(ctx, b.amp, sql, opts...)
		},
		FullEvery: b.fullEvery, ProgressBar: b.progressBar,
	}
}

// run runs every stream until ctx ends. A stream that stops on a
// permanent error stops alone (it reports failed on /readyz and
// amp_bridge_stream_up), unless exit_on_stream_failure is set; run returns
// once every stream has stopped, with the streams' errors.
func (b *bridge) run(ctx context.Context) error {
	if b.cfg.Cluster.Enabled {
		return b.runCluster(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		id  string
		err error
	}
	results := make(chan result, len(b.cfg.Streams))
	for _, sc := range b.cfg.Streams {
		r := pipeline.New(sc, b.deps(sc.ID))
		go health.Labelled(ctx, sc.ID, func(ctx context.Context) { results <- result{id: sc.ID, err: r.Run(ctx)} })
	}
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		b.health.Probe(ctx, b.probes())
	}()
	var errs []error
	for left := len(b.cfg.Streams); left > 0; left-- {
		res := <-results
		if res.err == nil {
			continue
		}
		errs = append(errs, res.err)
		if b.cfg.ExitOnStreamFailure {
			b.log.Error("a stream stopped on a permanent error; stopping every stream (exit_on_stream_failure)", "stream", res.id, "err", res.err)
			cancel()
			continue
		}
		b.log.Error("a stream stopped on a permanent error; the other streams go on", "stream", res.id, "err", res.err,
			"streams_left", left-1)
	}
	cancel()
	<-probed
	return errors.Join(errs...)
}

// notReady lists the configured streams that are not ready.
func (b *bridge) notReady() []string {
	var out []string
	rep := b.health.Report()
	for _, sc := range b.cfg.Streams {
		if !rep.Streams[sc.ID].Ready {
			out = append(out, sc.ID)
		}
	}
	return out
}

// serveHTTP serves /metrics, /livez and /readyz (health.Serve).
func (b *bridge) serveHTTP(ctx context.Context, addr string) (string, func(), error) {
	return health.Serve(ctx, addr, b.reg, b.health, b.cfg.HTTP.Pprof, b.log)
}

// defaultCommandTimeout bounds an operator command (status, verify,
// rewind, schema) unless -timeout says otherwise.
const defaultCommandTimeout = 30 * time.Second

// openCommand loads the configuration (loadFromFlags) and connects for an
// operator command: it adds -timeout and returns ctx bounded by it, connecting included, so that a service
// that accepts connections but never answers ends the command with an
// error naming it (pipeline.NoAnswer) instead of hanging. Call cancel when
// done.
func openCommand(ctx context.Context, fs *flag.FlagSet, args []string, stderr io.Writer, quiet bool,
	needs need) (context.Context, context.CancelFunc, *bridge, error) {
	timeout := fs.Duration("timeout", defaultCommandTimeout, "give up when the services have not answered within this long (0: no limit)")
	cfg, log, err := loadFromFlags(fs, args, stderr, quiet)
	if err != nil {
		return ctx, func() {}, nil, err
	}
	cancel := context.CancelFunc(func() {})
	if *timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, *timeout)
	}
	b, err := connect(ctx, cfg, log, needs)
	if err != nil {
		cancel()
		return ctx, func() {}, nil, err
	}
	return ctx, cancel, b, nil
}

// loadFromFlags parses a subcommand's flags (-c plus those fs already
// has), loads and validates the configuration and makes the command's
// logger. A quiet command logs warnings only: it is a one-shot command.
func loadFromFlags(fs *flag.FlagSet, args []string, stderr io.Writer, quiet bool) (*config.Config, *slog.Logger, error) {
	path := fs.String("c", "bridge.yaml", "configuration file")
	sets := config.SetFlags{}
	fs.Var(sets, "set", "override a configuration key: -set path=value (repeatable; e.g. -set kafka.brokers=a:9092)")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	cfg, err := config.LoadConfig(*path, sets.Lookup(os.LookupEnv))
	if err != nil {
		return nil, nil, err
	}
	lc := cfg.Log
	if quiet {
		lc.Level = "warn"
	}
	log := newLogger(lc, stderr)
	liblog.Use(log)
	return cfg, log, nil
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	cfg, log, err := loadFromFlags(fs, args, stderr, false)
	if err != nil {
		return err
	}
	setMemoryLimit(cfg, os.LookupEnv, memlimit.FromCgroup, log)
	// Serve /readyz (503 while waiting) before connecting: a sidecar may
	// start before its broker.
	b := newBridgeShell(cfg, log)
	b.wait = true
	defer b.close()
	if cfg.Log.Format != "json" && isTerminal(stderr) {
		// A bar for people at a terminal; JSON logs go to machines.
		b.progressBar = stderr
	}
	_, stop, err := b.serveHTTP(ctx, cfg.HTTP.Addr)
	if err != nil {
		return err
	}
	defer stop()
	log.Info("bridge starting", "version", buildVersion(), "streams", len(cfg.Streams), "amp", cfg.Amp.Addr,
		"kafka", cfg.Kafka.Brokers, "delivery", cfg.Kafka.Delivery, "checkpoint", cfg.Checkpoint.Store)
	if err := b.connect(ctx, needAll); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	return b.run(ctx)
}
