// Package health tracks whether a bridge process is ready and alive, for
// /readyz and /livez.
//
// A stream is ready when it is connected to Amp, Kafka, the registry and
// its checkpoint store and publishing: its run loop reports Ready when it
// opens the Amp stream and after every commit whose checkpoint was stored,
// NotReady with a reason when it loses a service (an Amp reconnect, a
// checkpoint store write that failed, a restart after a transient error),
// Failed when it stopped on a permanent error, and Done when a one-shot
// load ended after publishing its blocks (ready, and up: nothing is wrong).
// Around every blocking call to a service the run loop holds a Track: a
// call in flight for longer than Config.ReadyAfter makes the stream not
// ready while it lasts (a broker that stopped answering shows within that
// bound, whatever the call's own deadline), and one in flight for longer
// than Config.LiveAfter makes the process not alive (a run loop stuck past
// every deadline is a bug only a restart clears). Waiting for Amp to send
// data is not tracked: a quiet chain is healthy.
//
// Serve serves the endpoints, with /metrics beside them.
//
// Labelled runs a stream's goroutine under the pprof label "stream", and
// Stacks returns the stacks of a stream's goroutines by it: what a stream
// that does not stop when told to is doing.
//
// Probes check the services shared by every stream (the registry, the
// checkpoint store, Kafka) every Config.ProbeInterval; a failing probe makes
// every stream not ready until it passes again.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// State is a stream's state.
type State string

// States of a stream.
const (
	// StateStarting: connecting, reconciling, or backfilling before its
	// first report.
	StateStarting State = "starting"
	// StateReady: connected and publishing.
	StateReady State = "ready"
	// StateNotReady: it lost a service and is retrying.
	StateNotReady State = "not_ready"
	// StateFailed: it stopped on a permanent error; an operator must act.
	StateFailed State = "failed"
	// StateStopped: it ended (shutdown).
	StateStopped State = "stopped"
	// StateDone: a one-shot load (mode once) published its blocks and
	// ended. It counts as ready and up: the process may go on running
	// other streams, and nothing is wrong.
	StateDone State = "done"
	// StateStandby: in cluster mode, another member owns the stream. It
	// counts as ready on /readyz (a member that owns nothing is a healthy
	// standby) and as neither up nor ready in amp_bridge_stream_up and
	// amp_bridge_stream_ready, which are 1 on the member that runs it.
	StateStandby State = "standby"
)

// Config bounds the checks.
type Config struct {
	// ReadyAfter is how long a blocking call may be in flight before its
	// stream counts as not ready (default 10s).
	ReadyAfter time.Duration
	// LiveAfter is how long a blocking call may be in flight before the
	// process counts as wedged (/livez fails; default 5m). It must exceed
	// every service deadline.
	LiveAfter time.Duration
	// ProbeInterval is the pause between two rounds of probes (default 2s);
	// each probe is bounded by the same duration.
	ProbeInterval time.Duration
}

func (c Config) withDefaults() Config {
	if c.ReadyAfter <= 0 {
		c.ReadyAfter = 10 * time.Second
	}
	if c.LiveAfter <= 0 {
		c.LiveAfter = 5 * time.Minute
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 2 * time.Second
	}
	return c
}

// Probe checks one shared service.
type Probe struct {
	// Name names the service and its address for people: "registry at
	// http://…".
	Name string
	// Check returns nil when the service answers.
	Check func(ctx context.Context) error
}

// Tracker is the health of a bridge process: its streams and probes.
type Tracker struct {
	cfg Config
	now func() time.Time
	log *slog.Logger
	up  *prometheus.GaugeVec
	rdy *prometheus.GaugeVec

	mu      sync.Mutex
	streams map[string]*stream
	probes  map[string]error // by probe name: the last result
	order   []string         // stream ids in registration order
}

type stream struct {
	state  State
	reason string
	since  time.Time
	calls  map[uint64]call
	next   uint64
}

type call struct {
	what  string
	since time.Time
}

// New returns a tracker; reg receives amp_bridge_stream_up{stream} (1 while
// the stream runs, 0 once it failed or stopped) and
// amp_bridge_stream_ready{stream}. now is the clock (nil: time.Now).
func New(cfg Config, reg prometheus.Registerer, log *slog.Logger, now func() time.Time) *Tracker {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tracker{cfg: cfg.withDefaults(), now: now, log: log, streams: map[string]*stream{}, probes: map[string]error{},
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "amp_bridge", Name: "stream_up",
			Help: "1 while the stream runs (ready or retrying), 0 once it stopped on a permanent error or at shutdown."}, []string{"stream"}),
		rdy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "amp_bridge", Name: "stream_ready",
			Help: "1 while the stream is connected to every service and publishing (its /readyz), else 0."}, []string{"stream"}),
	}
	if reg != nil {
		reg.MustRegister(t.up, t.rdy)
	}
	return t
}

// Config returns the tracker's bounds, defaults filled in.
func (t *Tracker) Config() Config { return t.cfg }

// Stream registers stream id (starting) and returns its handle.
func (t *Tracker) Stream(id string) *Stream {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.streams[id]; !ok {
		t.streams[id] = &stream{state: StateStarting, since: t.now(), calls: map[uint64]call{}}
		t.order = append(t.order, id)
	}
	t.up.WithLabelValues(id).Set(1)
	t.rdy.WithLabelValues(id).Set(0)
	return &Stream{t: t, id: id}
}

// Stream is the handle through which one stream reports its health. Its
// methods are safe for concurrent use.
type Stream struct {
	t  *Tracker
	id string
}

func (s *Stream) set(st State, reason string) {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.streams[s.id]
	if x.state == StateFailed && st != StateStopped && st != StateStandby && st != StateStarting {
		return // failed is final until the process restarts, or another cluster member takes the stream over
	}
	if x.state != st || x.reason != reason {
		x.since = t.now()
	}
	x.state, x.reason = st, reason
	up := 1.0
	if st == StateFailed || st == StateStopped || st == StateStandby {
		up = 0
	}
	t.up.WithLabelValues(s.id).Set(up)
	ready := 0.0
	if st == StateReady || st == StateDone {
		ready = 1
	}
	t.rdy.WithLabelValues(s.id).Set(ready)
}

// Ready reports the stream connected and publishing.
func (s *Stream) Ready() { s.set(StateReady, "") }

// NotReady reports that the stream lost a service and is retrying; reason
// says which and why.
func (s *Stream) NotReady(reason string) { s.set(StateNotReady, reason) }

// Failed reports that the stream stopped on a permanent error.
func (s *Stream) Failed(err error) { s.set(StateFailed, err.Error()) }

// Stopped reports that the stream ended without a permanent error.
func (s *Stream) Stopped() { s.set(StateStopped, "") }

// Done reports that a one-shot load ended after publishing its blocks;
// detail says which.
func (s *Stream) Done(detail string) { s.set(StateDone, detail) }

// Standby reports, in cluster mode, that another member owns the stream;
// reason names the group.
func (s *Stream) Standby(reason string) { s.set(StateStandby, reason) }

// Starting reports, in cluster mode, that this member took the stream and
// is connecting: it is not ready until it publishes.
func (s *Stream) Starting(reason string) { s.set(StateStarting, reason) }

// Track records a blocking call to a service (what names it: "kafka:
// committing") until done is called.
func (s *Stream) Track(what string) (done func()) {
	t := s.t
	t.mu.Lock()
	x := t.streams[s.id]
	id := x.next
	x.next++
	x.calls[id] = call{what: what, since: t.now()}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(x.calls, id)
		t.mu.Unlock()
	}
}

// Calls names the stream's calls in flight, the longest-running first,
// each with how long it has run ("kafka: flushing for 2.1s"); nil when
// none is. Unlike Report's Stuck it includes calls younger than
// ReadyAfter: it says what a stream is doing right now.
func (s *Stream) Calls() []string {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	calls := slices.Collect(maps.Values(t.streams[s.id].calls))
	slices.SortFunc(calls, func(a, b call) int { return a.since.Compare(b.since) })
	var out []string
	for _, c := range calls {
		out = append(out, fmt.Sprintf("%s for %s", c.what, now.Sub(c.since).Round(time.Millisecond)))
	}
	return out
}

// StreamReport is one stream's health.
type StreamReport struct {
	// State is the stream's reported state; Ready also requires no call in
	// flight for longer than ReadyAfter and every probe passing.
	State State `json:"state"`
	// Ready is what /readyz answers for the stream.
	Ready bool `json:"ready"`
	// Reason says why it is not ready or failed.
	Reason string `json:"reason,omitempty"`
	// Since is when the state or reason last changed.
	Since time.Time `json:"since"`
	// Stuck names the innermost call in flight for longer than ReadyAfter
	// (and the outermost one around it), and Wedged reports the outermost
	// one past LiveAfter.
	Stuck  string `json:"stuck,omitempty"`
	Wedged bool   `json:"wedged,omitempty"`
}

// Report is the health of the process.
type Report struct {
	// Ready is true when every stream is ready.
	Ready bool `json:"ready"`
	// Live is false when a call has been in flight past LiveAfter.
	Live bool `json:"live"`
	// Streams by id.
	Streams map[string]StreamReport `json:"streams"`
	// Probes that fail, by name, with their error.
	Probes map[string]string `json:"failing_services,omitempty"`
}

// Report returns the health now.
func (t *Tracker) Report() Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	rep := Report{Ready: len(t.streams) > 0, Live: true, Streams: map[string]StreamReport{}}
	var failing []string
	for _, name := range slices.Sorted(maps.Keys(t.probes)) {
		if err := t.probes[name]; err != nil {
			if rep.Probes == nil {
				rep.Probes = map[string]string{}
			}
			rep.Probes[name] = err.Error()
			failing = append(failing, fmt.Sprintf("%s: %v", name, err))
		}
	}
	for _, id := range t.order {
		x := t.streams[id]
		sr := StreamReport{State: x.state, Reason: x.reason, Since: x.since}
		var oldest call
		for _, c := range x.calls {
			if oldest.since.IsZero() || c.since.Before(oldest.since) {
				oldest = c
			}
		}
		stuck := !oldest.since.IsZero() && now.Sub(oldest.since) > t.cfg.ReadyAfter
		if stuck {
			// Calls nest ("publishing a batch" around "kafka: flushing"): the
			// stuck call that began last is the most specific one, and names
			// the service; the outermost one is kept for context.
			inner := oldest
			for _, c := range x.calls {
				if now.Sub(c.since) > t.cfg.ReadyAfter && c.since.After(inner.since) {
					inner = c
				}
			}
			sr.Stuck = fmt.Sprintf("%s for %s", inner.what, now.Sub(inner.since).Round(time.Second))
			if inner.since != oldest.since {
				sr.Stuck += fmt.Sprintf(" (inside %s for %s)", oldest.what, now.Sub(oldest.since).Round(time.Second))
			}
			if now.Sub(oldest.since) > t.cfg.LiveAfter {
				sr.Wedged, rep.Live = true, false
			}
		}
		sr.Ready = x.state == StateReady && !stuck && len(failing) == 0 || x.state == StateDone || x.state == StateStandby
		if sr.Ready && x.state != StateDone && x.state != StateStandby {
			sr.Reason = ""
		} else if x.state == StateReady && sr.Reason == "" {
			switch {
			case stuck:
				sr.Reason = "waiting on " + sr.Stuck
			default:
				sr.Reason = failing[0]
			}
		}
		rep.Ready = rep.Ready && sr.Ready
		rep.Streams[id] = sr
	}
	return rep
}

// Probe runs the probes every ProbeInterval until ctx ends, each bounded
// by ProbeInterval, and logs each change of a probe's result.
func (t *Tracker) Probe(ctx context.Context, probes []Probe) {
	if len(probes) == 0 {
		return
	}
	tick := time.NewTicker(t.cfg.ProbeInterval)
	defer tick.Stop()
	for {
		for _, p := range probes {
			pctx, cancel := context.WithTimeout(ctx, t.cfg.ProbeInterval)
			err := p.Check(pctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			t.mu.Lock()
			prev, seen := t.probes[p.Name]
			t.probes[p.Name] = err
			t.mu.Unlock()
			switch {
			case err != nil && (prev == nil || !seen):
				t.log.Warn("a service does not answer: every stream reports not ready until it does", "service", p.Name, "err", err)
			case err == nil && prev != nil:
				t.log.Info("a service answers again", "service", p.Name)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ServeReady is /readyz: 200 when every stream (or the one named by the
// query parameter stream) is ready, else 503; the body is the Report as
// JSON.
func (t *Tracker) ServeReady(w http.ResponseWriter, r *http.Request) {
	rep := t.Report()
	ok := rep.Ready
	if id := r.URL.Query().Get("stream"); id != "" {
		sr, found := rep.Streams[id]
		if !found {
			http.Error(w, fmt.Sprintf("no stream %q", id), http.StatusNotFound)
			return
		}
		ok = sr.Ready
		rep.Streams = map[string]StreamReport{id: sr}
	}
	writeJSON(w, ok, rep)
}

// ServeLive is /livez: 200 unless a call has been in flight past LiveAfter.
func (t *Tracker) ServeLive(w http.ResponseWriter, _ *http.Request) {
	rep := t.Report()
	writeJSON(w, rep.Live, rep)
}

func writeJSON(w http.ResponseWriter, ok bool, v any) {
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
