package ampsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// Fault is an error injected into a DoGet call (see [Server.InjectFault]).
// Exactly one of Status, Disconnect or Delay should be set.
type Fault struct {
	// AfterBatches is the number of record-batch messages (data, keep-alive
	// and completion batches alike) the call sends before the fault fires.
	AfterBatches int
	// Status, a gRPC status error such as status.Error(codes.Internal, "…"),
	// ends the stream as the final status (scenario A21).
	Status error
	// Disconnect closes the client's TCP connection without a status (a
	// transport reset).
	Disconnect bool
	// Delay stalls the stream this long, then it continues normally.
	Delay time.Duration
}

// ScriptedBatch is one record batch sent by a [Script].
type ScriptedBatch struct {
	// Ranges and Complete form the app_metadata
	// {"ranges":Ranges,"ranges_complete":Complete}.
	Ranges []reorg.BlockRange
	// Complete is ranges_complete.
	Complete bool
	// Rows is the number of synthetic rows (of the query's schema) in the
	// batch; rows take their block numbers from Ranges[0].
	Rows int
	// AppMetadata, if non-nil, is sent verbatim instead of Ranges/Complete
	// (for malformed-metadata tests; an empty non-nil slice sends none).
	AppMetadata []byte
	// Delay is waited before the batch is sent (a slow or silent server).
	Delay time.Duration
}

// Script replaces the chain-driven stream of one DoGet with exact batches,
// for client negative tests (gaps, wrong prev_hash, duplicate networks,
// complete-with-rows, …). The schema is the query's, sent before the first
// batch.
type Script struct {
	// Batches are sent in order.
	Batches []ScriptedBatch
	// Status, if set, ends the stream after the batches.
	Status error
	// Hang keeps the stream open after the batches until the client
	// cancels (a streaming query never ends by itself). Otherwise the stream
	// ends normally (EOS).
	Hang bool
}

// Server is the simulator: a Flight server and the chains it serves.
type Server struct {
	flight.BaseFlightServer

	cfg    Config
	chains []*Chain // chains[0] is the primary network

	mu       sync.Mutex
	faults   []Fault
	scripts  []Script
	requests []RequestInfo
	conns    map[net.Conn]struct{}
	started  bool
	closed   bool

	// hidden are the hidden columns (columns.go), by hiddenKey.
	hiddenMu sync.RWMutex
	hidden   map[string]bool

	// bodies are the body buffers of sent messages (serverCodec).
	bodies growPool

	lis       net.Listener
	grpc      *grpc.Server
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New validates cfg and builds the server and its chains. It does not
// listen; call Start or Serve.
func New(cfg Config) (*Server, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: c, conns: map[net.Conn]struct{}{}, stop: make(chan struct{})}
	if s.hidden, err = c.parseHidden(c.HiddenColumns); err != nil {
		return nil, err
	}
	sy := newSynth()
	s.chains = append(s.chains, newChain(c.NetworkConfig, sy))
	for _, n := range c.ExtraNetworks {
		s.chains = append(s.chains, newChain(n, sy))
	}
	if c.ReplayBlocks > 0 {
		for _, ch := range s.chains {
			ch.replay = newReplay(c.ReplayBlocks, ch.cfg, sy, c.Allocator)
		}
	}
	return s, nil
}

// Start listens on Config.Addr and serves in the background until Close.
// ctx bounds only the listen call.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.started:
		return ErrStarted
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("ampsim: listening on %s: %w", s.cfg.Addr, err)
	}
	s.lis = &trackingListener{Listener: lis, s: s}
	opts := []grpc.ServerOption{grpc.WaitForHandlers(true), serverCodecOption()}
	if s.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.cfg.TLS)))
	}
	if s.cfg.Token != "" {
		opts = append(opts, grpc.ChainUnaryInterceptor(s.authUnary), grpc.ChainStreamInterceptor(s.authStream))
	}
	s.grpc = grpc.NewServer(opts...)
	flight.RegisterFlightServiceServer(s.grpc, s)
	s.started = true
	s.wg.Go(func() {
		if err := s.grpc.Serve(s.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.cfg.Logger.Error("serving flight", "error", err)
		}
	})
	if s.cfg.BlockInterval > 0 {
		s.wg.Go(s.mineOnTimer)
	}
	s.cfg.Logger.Info("ampsim listening", "addr", s.lis.Addr().String())
	return nil
}

// Serve starts the server and blocks until ctx is done, then closes it.
func (s *Server) Serve(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return s.Close()
}

// Addr returns the listen address (host:port), "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lis == nil {
		return ""
	}
	return s.lis.Addr().String()
}

// Close stops serving: open streams are cancelled, connections closed and
// the block timer stopped. It waits for every goroutine and is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		g := s.grpc
		s.mu.Unlock()
		close(s.stop)
		if g != nil {
			g.Stop()
		}
		s.wg.Wait()
		for _, c := range s.chains {
			if c.replay != nil {
				c.replay.release()
			}
		}
	})
	return nil
}

// Chain returns the chain of network.
func (s *Server) Chain(network string) (*Chain, error) {
	for _, c := range s.chains {
		if c.Network() == network {
			return c, nil
		}
	}
	return nil, fmt.Errorf("ampsim: network %q: %w", network, ErrUnknownNetwork)
}

// Primary returns the primary network's chain.
func (s *Server) Primary() *Chain { return s.chains[0] }

// Mine appends n blocks to the primary chain.
func (s *Server) Mine(n int) { s.chains[0].Mine(n) }

// Reorg replaces the last depth blocks of the primary chain with newBlocks
// new ones (see [Chain.Reorg]).
func (s *Server) Reorg(depth, newBlocks int) error { return s.chains[0].Reorg(depth, newBlocks) }

// Head returns the primary chain's head block number.
func (s *Server) Head() (uint64, bool) { return s.chains[0].Head() }

// BlockHash returns the hash of canonical block n of the primary chain.
func (s *Server) BlockHash(n uint64) (reorg.Hash, bool) { return s.chains[0].BlockHash(n) }

// InjectFault queues a fault; each DoGet call takes the oldest queued fault.
func (s *Server) InjectFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
}

// EnqueueScript queues a script; each DoGet call takes the oldest queued
// script and sends it instead of the chain-driven stream.
func (s *Server) EnqueueScript(sc Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scripts = append(s.scripts, sc)
}

// Requests returns every GetFlightInfo and DoGet call seen so far.
func (s *Server) Requests() []RequestInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RequestInfo(nil), s.requests...)
}

// DropConnections closes every client TCP connection at once (a network
// failure while streams are open).
func (s *Server) DropConnections() {
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// TableSchema returns Amp's Arrow schema of an EVM-RPC table ("blocks",
// "transactions" or "logs", §4.3).
func TableSchema(table string) (*arrow.Schema, error) {
	t := tableDef(table)
	if t == nil {
		return nil, fmt.Errorf("ampsim: unknown table %q: want blocks, transactions or logs", table)
	}
	return t.schema, nil
}

func (s *Server) record(ri RequestInfo) {
	s.mu.Lock()
	s.requests = append(s.requests, ri)
	s.mu.Unlock()
	if s.cfg.OnRequest != nil {
		s.cfg.OnRequest(ri)
	}
}

func (s *Server) takeFault() (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.faults) == 0 {
		return Fault{}, false
	}
	f := s.faults[0]
	s.faults = s.faults[1:]
	return f, true
}

func (s *Server) takeScript() (Script, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.scripts) == 0 {
		return Script{}, false
	}
	sc := s.scripts[0]
	s.scripts = s.scripts[1:]
	return sc, true
}

func (s *Server) mineOnTimer() {
	t := time.NewTicker(s.cfg.BlockInterval)
	defer t.Stop()
	tick := 0
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		tick++
		c := s.chains[0]
		if s.cfg.ReorgEvery > 0 && tick%s.cfg.ReorgEvery == 0 {
			if err := c.Reorg(s.cfg.ReorgDepth, s.cfg.ReorgDepth+1); err == nil {
				continue
			}
		}
		c.Mine(1)
	}
}

// trackingListener records accepted connections so DropConnections and
// Fault.Disconnect can cut them.
type trackingListener struct {
	net.Listener
	s *Server
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, s: l.s}
	l.s.mu.Lock()
	l.s.conns[tc] = struct{}{}
	l.s.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}
