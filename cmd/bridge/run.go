package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/sr"
	"golang.org/x/sync/errgroup"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// bridge is the shared components of a bridge process, each built only
// when the command needs it.
type bridge struct {
	cfg      *config.Config
	log      *slog.Logger
	reg      *prometheus.Registry
	metrics  *pipeline.Metrics
	amp      *source.Client
	kafka    sink.Config
	admin    *sink.Admin
	store    pipeline.Store
	closers  []func()
	registry *encode.Registry
	control  *offsets.ControlCodec
	// readyMu guards readySet: the streams that are connected.
	readyMu  sync.Mutex
	readySet map[string]bool
	events   func(pipeline.Event)
	// verifyWait bounds verify's canonical-chain check (default 3s).
	verifyWait time.Duration
	// progressBar receives the backfill progress bar (stderr, when it is a
	// terminal and the log is text); nil logs progress lines.
	progressBar io.Writer
	// fullEvery overrides how often a watermark carries the checkpoint
	// (tests; 0 is the pipeline's default).
	fullEvery int
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
	b := &bridge{cfg: cfg, log: log, reg: prometheus.NewRegistry(), kafka: cfg.Sink()}
	b.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b.metrics = pipeline.NewMetrics(b.reg)
	var err error
	if b.control, err = offsets.NewControlCodec(); err != nil {
		return nil, err
	}
	if needs&needAmp != 0 {
		if b.amp, err = source.New(cfg.Source(), source.Deps{Logger: log.With("component", "source")}); err != nil {
			return nil, fmt.Errorf("configuring the Amp client: %w", err)
		}
		b.closers = append(b.closers, func() { _ = b.amp.Close() })
	}
	if needs&needKafka != 0 {
		// client=admin: the Admin's franz-go lines are every stream's (the
		// streams' own lines go through Admin.WithLogger).
		sdeps := sink.Deps{Logger: log.With("component", "sink", "client", "admin"), Registerer: b.reg}
		if b.admin, err = sink.NewAdmin(ctx, b.kafka, sdeps); err != nil {
			b.close()
			return nil, fmt.Errorf("connecting to Kafka: %w", pipeline.NoAnswer(pipeline.KafkaService(b.kafka.Brokers), err))
		}
		b.closers = append(b.closers, b.admin.Close)
	}
	if needs&needStore != 0 {
		if err := b.openStore(ctx); err != nil {
			b.close()
			return nil, err
		}
	}
	if needs&needRegistry != 0 {
		if err := b.openRegistry(); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
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
	default:
		rs, err := offsets.NewRedisStore(ctx, cfg.Redis(), log.With("component", "offsets"))
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
func (b *bridge) openRegistry() error {
	cfg := b.cfg
	if cfg.Registry.URL != "" {
		opts := []sr.ClientOpt{sr.URLs(cfg.Registry.URL)}
		if cfg.Registry.Username != "" {
			opts = append(opts, sr.BasicAuth(cfg.Registry.Username, string(cfg.Registry.Password)))
		}
		cl, err := sr.NewClient(opts...)
		if err != nil {
			return fmt.Errorf("configuring the schema registry client: %w", err)
		}
		b.registry = encode.NewRegistry(cl)
	}
	return nil
}

func (b *bridge) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
	b.closers = nil
}

// deps are the pipeline's dependencies of stream sc.
func (b *bridge) deps() pipeline.Deps {
	return pipeline.Deps{
		Logger: b.log, Metrics: b.metrics, Registerer: b.reg, Amp: b.amp, Kafka: b.kafka, Admin: b.admin,
		Store: b.store, Registry: b.registry, Control: b.control, ControlTopic: b.cfg.Kafka.ControlTopic,
		ReplicationFactor: b.cfg.Kafka.ReplicationFactor, Version: buildVersion(), Now: time.Now, Ready: b.setReady,
		RestartMin: b.cfg.Amp.ReconnectMin, RestartMax: b.cfg.Amp.ReconnectMax, Events: b.events,
		Heads: func(ctx context.Context, sql string, opts ...source.StreamOption) (map[string]uint64, error) {
			return pipeline.SyncedHeads(ctx, b.amp, sql, opts...)
		},
		FullEvery: b.fullEvery, ProgressBar: b.progressBar,
	}
}

// run runs every stream until ctx ends; the first stream to fail stops the
// others.
func (b *bridge) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, sc := range b.cfg.Streams {
		r := pipeline.New(sc, b.deps())
		g.Go(func() error { return r.Run(gctx) })
	}
	return g.Wait()
}

func (b *bridge) setReady(stream string, ok bool) {
	b.readyMu.Lock()
	defer b.readyMu.Unlock()
	if b.readySet == nil {
		b.readySet = map[string]bool{}
	}
	b.readySet[stream] = ok
}

// notReady lists the configured streams that are not connected.
func (b *bridge) notReady() []string {
	b.readyMu.Lock()
	defer b.readyMu.Unlock()
	var out []string
	for _, sc := range b.cfg.Streams {
		if !b.readySet[sc.ID] {
			out = append(out, sc.ID)
		}
	}
	return out
}

// serveHTTP serves /metrics, /livez and /readyz; it returns the address
// it listens on and a function that stops it.
func (b *bridge) serveHTTP(ctx context.Context, addr string) (string, func(), error) {
	if addr == "" || addr == "off" {
		return "", func() {}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(b.reg, promhttp.HandlerOpts{Registry: b.reg}))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if waiting := b.notReady(); len(waiting) > 0 {
			http.Error(w, fmt.Sprintf("not ready: streams %v are connecting to Amp, Kafka, the registry or the checkpoint store", waiting),
				http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	if b.cfg.HTTP.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	lc := net.ListenConfig{}
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listening for metrics on %s (config http.addr): %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Warn("metrics server stopped", "err", err)
		}
	}()
	b.log.Info("serving /metrics, /livez, /readyz", "addr", ln.Addr().String())
	return ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}

// defaultCommandTimeout bounds an operator command (status, verify,
// rewind, schema) unless -timeout says otherwise.
const defaultCommandTimeout = 30 * time.Second

// openCommand is openFromFlags for an operator command: it adds -timeout
// and returns ctx bounded by it, connecting included, so that a service
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

// openFromFlags parses a subcommand's flags (-c plus those fs already
// has), loads and validates the configuration and connects a bridge.
func openFromFlags(ctx context.Context, fs *flag.FlagSet, args []string, stderr io.Writer, quiet bool, needs need) (*bridge, error) {
	cfg, log, err := loadFromFlags(fs, args, stderr, quiet)
	if err != nil {
		return nil, err
	}
	return connect(ctx, cfg, log, needs)
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
	setLibraryLogger(log)
	return cfg, log, nil
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer) error {
	b, err := openFromFlags(ctx, flag.NewFlagSet("run", flag.ContinueOnError), args, stderr, false, needAll)
	if err != nil {
		return err
	}
	defer b.close()
	cfg, log := b.cfg, b.log
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
	return b.run(ctx)
}
