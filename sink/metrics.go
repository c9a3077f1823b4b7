package sink

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the sink's own Prometheus metrics. Several Producers (streams,
// backfill workers) share one registry: each metric is registered once and
// later Producers reuse the registered collector.
type metrics struct {
	recordsWritten *prometheus.CounterVec   // stream, op
	txnCommits     *prometheus.CounterVec   // stream
	txnAborts      *prometheus.CounterVec   // stream, reason
	txnDuration    *prometheus.HistogramVec // stream, outcome
	commitDuration *prometheus.HistogramVec // stream
}

func newMetrics(reg prometheus.Registerer, ns string) (*metrics, error) {
	m := &metrics{
		recordsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "records_written_total",
			Help: "Records made visible in Kafka (committed, or flushed in at-least-once mode), by op.",
		}, []string{"stream", "op"}),
		txnCommits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "txn_commits_total",
			Help: "Kafka transactions committed (or at-least-once units flushed).",
		}, []string{"stream"}),
		txnAborts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "txn_aborts_total",
			Help: "Kafka transactions that did not commit, by reason (requested, produce_error, not_attempted, fenced, unknown).",
		}, []string{"stream", "reason"}),
		txnDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "txn_duration_seconds",
			Help:    "Time from Begin to the end of the transaction, by outcome (committed, aborted, fenced, unknown).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"stream", "outcome"}),
		commitDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "txn_commit_seconds",
			Help:    "Time of Commit: flushing the buffered records and EndTransaction.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"stream"}),
	}
	var err error
	if m.recordsWritten, err = register(reg, m.recordsWritten); err != nil {
		return nil, err
	}
	if m.txnCommits, err = register(reg, m.txnCommits); err != nil {
		return nil, err
	}
	if m.txnAborts, err = register(reg, m.txnAborts); err != nil {
		return nil, err
	}
	if m.txnDuration, err = register(reg, m.txnDuration); err != nil {
		return nil, err
	}
	if m.commitDuration, err = register(reg, m.commitDuration); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// the same description.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("registering sink metrics: %w", err)
	}
	return c, nil
}

// lenientRegisterer wraps the injected registerer for kprom, whose
// promauto registration panics on a duplicate. A duplicate happens when a
// second client with the same stream label is created before the first is
// closed; its client metrics are then not exported (logged), instead of
// crashing the process.
type lenientRegisterer struct {
	prometheus.Registerer
	log *slog.Logger
}

// MustRegister registers cs, logging instead of panicking on a duplicate.
func (r lenientRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			r.log.Warn("kafka client metrics not registered (is another client of this stream still open?)", "err", err)
		}
	}
}
