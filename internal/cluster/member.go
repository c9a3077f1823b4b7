// Package cluster runs `bridge run` as one member of a cluster of bridges
// that share the configuration's streams (README, "Cluster mode").
//
// Ownership is Kafka's: the members join a consumer group on a
// coordination topic (sink.JoinGroup), and the group's leader spreads the
// streams by weight (Plan) with the cooperative protocol, so a rebalance
// moves only what must move and nothing else stops. A member runs each
// stream it is given with the pipeline, as a single process runs all of
// them; when it loses one, it stops it within cluster.release_timeout (the
// stream's shutdown commits an open transaction that ends at a watermark,
// else aborts it). The new owner's producer takes the stream's
// transactional id, which fences a member that lost its session (a pause,
// a partition) before it can commit anything, and the checkpoint store's
// compare-and-set is the second guard; a fenced member drops the stream
// and waits for the group.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/health"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// Stream is one item the cluster shares: a stream, or a backfill worker of
// one.
type Stream struct {
	// ID is the item's id.
	ID string
	// Weight is its weight when it is not backfilling (streams[].weight for
	// a stream; 0 for an idle backfill worker).
	Weight int
	// Busy is the weight of a backfill worker while it backfills, before
	// Config.BackfillWeight multiplies it (its stream's weight).
	Busy int
}

// Config configures a member.
type Config struct {
	// Group is the membership (config.Config.Group).
	Group sink.GroupConfig
	// Streams are the configuration's streams.
	Streams []Stream
	// ReleaseTimeout bounds stopping a stream the member lost.
	ReleaseTimeout time.Duration
	// BackfillWeight multiplies the weight of a stream while it backfills.
	BackfillWeight int
	// ReplicationFactor of the coordination topic when the bridge creates
	// it (-1: the broker's default).
	ReplicationFactor int16
	// ExitOnStreamFailure ends Run when a stream stops on a permanent
	// error (exit_on_stream_failure).
	ExitOnStreamFailure bool
}

// Health is where the member reports a stream it does not run;
// health.Stream implements it.
type Health interface {
	// Standby: another member owns it.
	Standby(reason string)
	// Starting: this member took it and is connecting.
	Starting(reason string)
	// Calls names the stream's calls to services in flight, for a stream
	// that does not stop when released.
	Calls() []string
}

// Deps are what a member is built from; cmd/bridge wires them.
type Deps struct {
	// Logger receives the member's logs.
	Logger *slog.Logger
	// Registerer receives the cluster metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Kafka configures the group's client.
	Kafka sink.Config
	// Admin creates the coordination topic.
	Admin *sink.Admin
	// Run publishes stream id until ctx ends or a permanent error
	// (pipeline.Stream.Run).
	Run func(ctx context.Context, id string) error
	// Health returns the health of stream id.
	Health func(id string) Health
	// Backfilling reports whether stream id is running its backfill on
	// this member (nil: never); it then weighs BackfillWeight times more.
	Backfilling func(id string) bool
	// Idle reports whether this member knows that backfill worker item id
	// has nothing to do, wherever it runs: its stream has gone live (nil:
	// never known). The member then reports it as weighing 0, known, so
	// that the plan neither places it as busy nor moves a stream to even
	// out the load it does not add.
	Idle func(id string) bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Crashed, when set and true once Run's context ends, makes the
	// member stop as a crashed process would, for tests that crash members
	// in process: its streams stop, but it does not leave the group, so
	// the others take them over only after the session timeout
	// (sink.Group.Abandon).
	Crashed func() bool
}

// Member is one bridge of a cluster.
type Member struct {
	cfg Config
	d   Deps
	log *slog.Logger
	m   *metrics

	group *sink.Group
	// streamCtx returns a context of Run's for a stream to run under.
	streamCtx func() (context.Context, context.CancelCauseFunc)

	mu     sync.Mutex
	owned  map[string]*owned
	joined bool
	// failed receives the permanent errors of streams when
	// ExitOnStreamFailure is set.
	failed chan error
	// lostAt is when the member last lost or released streams, for the
	// rebalance's duration (zero: none pending).
	lostAt time.Time
	// reported are the weights of the last join (watchWeights).
	reported []sink.GroupItem
}

// owned is a stream the member runs.
type owned struct {
	id     string
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// ended reports whether the item's run has returned while the member still
// owns it (an idle backfill worker, a one-shot load done, a failed stream).
func (o *owned) ended() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// New returns a member; Run joins the group.
func New(cfg Config, d Deps) *Member {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if cfg.BackfillWeight < 1 {
		cfg.BackfillWeight = 1
	}
	log := d.Logger.With("component", "cluster", "group", cfg.Group.Group)
	return &Member{cfg: cfg, d: d, log: log, m: newMetrics(d.Registerer), owned: map[string]*owned{}, failed: make(chan error, len(cfg.Streams))}
}

// Run creates or grows the coordination topic, joins the group and runs
// the streams the group gives this member until ctx ends; then it stops
// them (each commits at a watermark or aborts) and leaves the group, so
// that the others take them over at once (a static member, with an
// instance id, does not leave: its streams wait for it to come back or for
// its session to end). It returns a permanent error of
// the membership (a missing group ACL), or of a stream with
// ExitOnStreamFailure.
func (m *Member) Run(ctx context.Context) error {
	m.streamCtx = func() (context.Context, context.CancelCauseFunc) { return context.WithCancelCause(ctx) }
	// A slot per item, and some to spare: a slot stays with a member that
	// releases its item until the next round, and members of an older
	// configuration may hold slots of items this one does not have.
	n := len(m.cfg.Streams)
	if err := m.d.Admin.EnsureCoordinationTopic(ctx, m.cfg.Group.Topic, int32(n+n/4+2), m.cfg.ReplicationFactor); err != nil {
		return fmt.Errorf("preparing cluster coordination topic %q: %w", m.cfg.Group.Topic, err)
	}
	for _, s := range m.cfg.Streams {
		m.d.Health(s.ID).Starting(fmt.Sprintf("joining cluster group %q", m.cfg.Group.Group))
	}
	g, err := sink.JoinGroup(m.d.Kafka, m.cfg.Group, m.items, Plan,
		sink.GroupHandler{Assigned: m.assigned, Revoked: m.revoked, Lost: m.lost},
		sink.Deps{Logger: m.log, Registerer: nil, Now: m.d.Now})
	if err != nil {
		return err
	}
	m.group = g
	defer g.Close()
	m.log.Info("joined the cluster: streams are shared with the group's other members", "topic", m.cfg.Group.Topic,
		"session_timeout", m.cfg.Group.SessionTimeout, "instance_id", m.cfg.Group.InstanceID, "streams", len(m.cfg.Streams))
	watch := make(chan error, 1)
	go func() { watch <- g.Run(ctx) }()
	wctx, stopWeights := context.WithCancel(ctx)
	defer stopWeights()
	go m.watchWeights(wctx)
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-watch:
	case runErr = <-m.failed:
	}
	if runErr == nil && m.d.Crashed != nil && m.d.Crashed() {
		m.log.Warn("crashing (a test hook): stopping without leaving the cluster group; the others wait out the session")
		g.Abandon()
		m.stopAll(m.cfg.ReleaseTimeout)
		if err := <-watch; err != nil {
			m.log.Warn("the cluster group session ended with an error", "err", err)
		}
		return nil
	}
	// Leave: release every stream (Revoked), then tell the coordinator, so
	// that the others need not wait out the session.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ReleaseTimeout+5*time.Second)
	defer cancel()
	if err := g.Leave(lctx); err != nil {
		m.log.Warn("leaving the cluster group", "err", err)
	}
	m.stopAll(m.cfg.ReleaseTimeout)
	g.Close()
	if runErr == nil {
		if err := <-watch; err != nil {
			m.log.Debug("the group's watch ended", "err", err)
		}
	}
	m.log.Info("left the cluster group")
	return runErr
}

// weightsEvery is how often a member compares its items' weights with
// those it reported at its last join.
const weightsEvery = 2 * time.Second

// watchWeights asks the group for a new round when a weight this member
// reports changed (a backfill worker began or ended): the leader then
// spreads the load again.
func (m *Member) watchWeights(ctx context.Context) {
	t := time.NewTicker(weightsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		last := m.reported
		m.mu.Unlock()
		if last != nil && !slices.Equal(last, m.weights()) {
			m.mu.Lock()
			m.reported = nil // once per change, until the next join
			m.mu.Unlock()
			m.log.Info("stream weights changed (a backfill began or ended): asking the group to rebalance")
			m.group.Rejoin()
		}
	}
}

// weights are the items' weights now, without recording them.
func (m *Member) weights() []sink.GroupItem {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]sink.GroupItem, 0, len(m.cfg.Streams))
	for _, s := range m.cfg.Streams {
		busy := m.d.Backfilling != nil && m.d.Backfilling(s.ID)
		it := sink.GroupItem{ID: s.ID, Weight: max(s.Weight, 0)}
		o, mine := m.owned[s.ID]
		switch {
		case busy:
			it.Weight = max(s.Weight, s.Busy, 1) * m.cfg.BackfillWeight
		case s.Busy > 0 && m.d.Idle != nil && m.d.Idle(s.ID):
			// Its stream has gone live: idle wherever it runs.
			it.Weight, it.Known = 0, true
		case s.Busy > 0 && (!mine || !o.ended()):
			// A backfill worker is busy until its run here has found its
			// part published or its stream live (then it weighs 0); one
			// another member owns is assumed busy (its owner's report, or
			// a member's that knows, wins at the leader).
			it.Weight = s.Busy * m.cfg.BackfillWeight
		}
		out = append(out, it)
	}
	return out
}

// items are what this member tells the group it can run, with their
// weights now.
func (m *Member) items() []sink.GroupItem {
	out := m.weights()
	for _, it := range out {
		m.m.weight.WithLabelValues(it.ID).Set(float64(it.Weight))
	}
	m.mu.Lock()
	m.reported = out
	m.mu.Unlock()
	return out
}

func (m *Member) assigned(_ context.Context, g sink.Generation, ids []string) {
	m.mu.Lock()
	first := !m.joined
	m.joined = true
	lostAt := m.lostAt
	m.lostAt = time.Time{}
	for _, id := range ids {
		if _, ok := m.owned[id]; !ok {
			m.startLocked(id)
		}
	}
	n := len(m.owned)
	var standby []string
	if first {
		for _, s := range m.cfg.Streams {
			if _, ok := m.owned[s.ID]; !ok {
				standby = append(standby, s.ID)
			}
		}
	}
	m.mu.Unlock()
	for _, id := range standby {
		m.d.Health(id).Standby(m.standbyReason())
	}
	m.m.generation.Set(float64(g.Generation))
	m.m.ownedCount.Set(float64(n))
	m.m.rebalances.WithLabelValues("assigned").Inc()
	if !lostAt.IsZero() {
		m.m.rebalanceSeconds.Observe(m.d.Now().Sub(lostAt).Seconds())
	}
	if len(ids) > 0 || first {
		m.log.Info("cluster assignment", "member", g.MemberID, "generation", g.Generation, "added", ids, "owned", n)
	}
}

func (m *Member) standbyReason() string {
	return fmt.Sprintf("owned by another member of cluster group %q", m.cfg.Group.Group)
}

// revoked stops the streams the member lost in a rebalance, each bounded by
// ReleaseTimeout, before the member rejoins.
func (m *Member) revoked(_ context.Context, ids []string) {
	m.release(ids, m.cfg.ReleaseTimeout, "revoked", nil)
}

// lost stops the streams of a member whose session ended: another member
// may run them already and fences this one, so the wait is short.
func (m *Member) lost(_ context.Context, ids []string) {
	m.log.Warn("the cluster session ended (a missed heartbeat, a pause or a partition): another member takes these streams over",
		"streams", ids)
	m.release(ids, min(m.cfg.ReleaseTimeout, 2*time.Second), "lost", ErrLost)
}

// ErrLost is the cause a lost stream's context is canceled with: it wraps
// sink.ErrFenced, and the stream stops without committing or aborting its
// open transaction (the new owner's producer aborts it).
var ErrLost = fmt.Errorf("%w: the cluster session ended and another member took the stream over", sink.ErrFenced)

// release stops the streams ids, canceling each with cause (nil: a plain
// cancel, after which a stream commits at a watermark or aborts), and
// waits up to bound for them.
func (m *Member) release(ids []string, bound time.Duration, why string, cause error) {
	began := m.d.Now()
	m.mu.Lock()
	if m.lostAt.IsZero() {
		m.lostAt = began
	}
	var stop []*owned
	for _, id := range ids {
		if o, ok := m.owned[id]; ok {
			delete(m.owned, id)
			stop = append(stop, o)
			m.m.owned.WithLabelValues(id).Set(0)
		}
	}
	n := len(m.owned)
	m.mu.Unlock()
	for _, o := range stop {
		o.cancel(cause)
	}
	if running := waitAll(stop, bound); len(running) > 0 {
		doing := map[string][]string{}
		for _, o := range running {
			doing[o.id] = m.d.Health(o.id).Calls()
		}
		stuck := slices.Sorted(maps.Keys(doing))
		m.log.Warn("a released stream did not stop within the bound; rejoining anyway: its new owner fences it",
			"streams", stuck, "bound", bound, "in_flight", doing, "stacks", health.Stacks(stuck))
	}
	for _, id := range ids {
		m.d.Health(id).Standby(m.standbyReason())
	}
	m.m.ownedCount.Set(float64(n))
	m.m.rebalances.WithLabelValues(why).Inc()
	m.m.releaseSeconds.Observe(m.d.Now().Sub(began).Seconds())
	m.log.Info("released streams to the cluster", "why", why, "streams", ids, "took", m.d.Now().Sub(began).Round(time.Millisecond))
}

// stopAll stops every stream still running (after leaving the group).
func (m *Member) stopAll(bound time.Duration) {
	m.mu.Lock()
	var ids []string
	for id := range m.owned {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	if len(ids) > 0 {
		m.release(ids, bound, "leaving", nil)
	}
}

// waitAll waits up to bound for every stream of os to stop, and returns
// those still running then.
func waitAll(os []*owned, bound time.Duration) []*owned {
	t := time.NewTimer(bound)
	defer t.Stop()
	for i, o := range os {
		select {
		case <-o.done:
		case <-t.C:
			return slices.DeleteFunc(slices.Clone(os[i:]), (*owned).ended)
		}
	}
	return nil
}

// startLocked runs stream id until the member releases it.
func (m *Member) startLocked(id string) {
	ctx, cancel := m.streamCtx()
	o := &owned{id: id, cancel: cancel, done: make(chan struct{})}
	m.owned[id] = o
	m.m.owned.WithLabelValues(id).Set(1)
	m.d.Health(id).Starting("this member took it over")
	go func() {
		defer close(o.done)
		health.Labelled(ctx, id, func(ctx context.Context) { m.runStream(ctx, id, o) })
	}()
}

// runStream runs one owned stream. A stream fenced by another producer of
// its transactional id lost it to another member whose news has not
// reached this one yet: it waits a session timeout for the group, then,
// if the group still says it owns the stream, starts it again.
func (m *Member) runStream(ctx context.Context, id string, o *owned) {
	for {
		err := m.d.Run(ctx, id)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			return // a one-shot load that ended, or a stream stopped
		}
		if !fenced(err) {
			m.log.Error("a stream stopped on a permanent error; it stays with this member, and the others go on", "stream", id, "err", err)
			if m.cfg.ExitOnStreamFailure {
				m.failed <- fmt.Errorf("stream %s: %w", id, err)
			}
			return // failed: its health says why, and it stays with this member
		}
		m.log.Warn("another producer took the stream's transactional id: another member owns it now, or a bridge outside "+
			"this cluster group runs it (every bridge sharing these streams must run in cluster mode with the same group); "+
			"waiting for the group", "stream", id, "err", err, "wait", m.cfg.Group.SessionTimeout)
		m.d.Health(id).Standby("fenced by another producer of its transactional id; waiting for the cluster group")
		m.group.Rejoin()
		t := time.NewTimer(m.cfg.Group.SessionTimeout)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		m.d.Health(id).Starting("the group still gives it to this member; starting it again")
	}
}

// fenced reports whether err means another producer or checkpoint writer
// took the stream.
func fenced(err error) bool {
	return errors.Is(err, sink.ErrFenced) || errors.Is(err, offsets.ErrFenced)
}
