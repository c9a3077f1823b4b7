package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
)

// Metrics are the bridge's own metrics (kafka-conventions.md
// §metrics). The sink registers the transaction metrics
// (amp_bridge_records_written_total{op}, txn_commits_total,
// txn_aborts_total{reason}, txn_duration_seconds, txn_commit_seconds) and
// franz-go's client metrics through kprom on the same registry.
type Metrics struct {
	polled           *prometheus.CounterVec
	batchesCommitted *prometheus.CounterVec
	reorgs           *prometheus.CounterVec
	reorgDepth       *prometheus.HistogramVec
	retractions      *prometheus.CounterVec
	reconnects       *prometheus.CounterVec
	restarts         *prometheus.CounterVec
	reconciliations  *prometheus.CounterVec
	checkpointTime   *prometheus.GaugeVec
	checkpointErrors *prometheus.CounterVec
	behindSource     *prometheus.GaugeVec
	committedBlock   *prometheus.GaugeVec
	behindHead       *prometheus.GaugeVec
	backfillLeft     *prometheus.GaugeVec
	txnBoundary      *prometheus.HistogramVec
	// labelMisses counts rows whose key a label file lacks (labels.go).
	labelMisses *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg (nil: not
// registered). Build them once per process: every stream labels them.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns = "amp_bridge"
	stream := []string{"stream"}
	m := &Metrics{
		polled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "records_polled_total",
			Help: "Rows received from Amp."}, stream),
		batchesCommitted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "batches_committed_total",
			Help: "Microbatches committed to Kafka."}, stream),
		reorgs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reorgs_total",
			Help: "Reorganisations detected."}, stream),
		reorgDepth: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "reorg_depth_blocks",
			Help: "Blocks invalidated per reorg.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}, stream),
		retractions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "retractions_total",
			Help: "Rows retracted after reorgs."}, stream),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "amp_reconnects_total",
			Help: "Reconnects of the Amp stream."}, stream),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "stream_restarts_total",
			Help: "Restarts of a stream from its checkpoint after an unknown transaction outcome."}, stream),
		reconciliations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reconciliations_total",
			Help: "Checkpoint reconciliations with Kafka at start, by outcome."}, []string{"stream", "outcome"}),
		checkpointTime: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "checkpoint_timestamp_seconds",
			Help: "Unix time of the last stored checkpoint (checkpoint age = time() - this)."}, stream),
		checkpointErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "checkpoint_errors_total",
			Help: "Checkpoint store commits that failed (Kafka kept the state; the next start repairs the store)."}, stream),
		behindSource: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "behind_source_seconds",
			Help: "Age of the newest committed block (commit time minus the block's timestamp), per network."}, []string{"stream", "network"}),
		committedBlock: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "committed_block",
			Help: "Number of the newest committed block, per network (compare with the chain head)."}, []string{"stream", "network"}),
		behindHead: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "behind_head_blocks",
			Help: "Blocks between Amp's synced head and the newest committed block, per network (polled every streams[].head_poll_interval)."}, []string{"stream", "network"}),
		backfillLeft: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "backfill_blocks_remaining",
			Help: "Blocks the stream's backfill has still to publish before the hand-over to live (0 once live)."}, stream),
		txnBoundary: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "txn_boundary_seconds",
			Help:    "The stall between two transactions of the live stream: from the last record of one to the first record of the next produced (or to the first's Kafka commit, when the next record came from Amp later).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, stream),
		labelMisses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "label_misses_total",
			Help: "Rows from Amp whose key a label file (streams[].labels) lacks: dropped by an inner join, or published with null labels by a left join."},
			[]string{"stream", "outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.polled, m.batchesCommitted, m.reorgs, m.reorgDepth,
			m.retractions, m.reconnects, m.restarts, m.reconciliations, m.checkpointTime, m.checkpointErrors,
			m.behindSource, m.committedBlock, m.behindHead, m.backfillLeft, m.txnBoundary, m.labelMisses)
	}
	return m
}

// Init creates every series of stream at zero, so that increase() sees
// the first event, and the per-network series of the networks given.
func (m *Metrics) Init(stream string, networks ...string) {
	for _, o := range offsets.Outcomes() {
		m.reconciliations.WithLabelValues(stream, o.String())
	}
	for _, c := range []*prometheus.CounterVec{m.polled, m.batchesCommitted, m.reorgs,
		m.retractions, m.reconnects, m.restarts, m.checkpointErrors} {
		c.WithLabelValues(stream)
	}
	m.reorgDepth.WithLabelValues(stream)
	m.txnBoundary.WithLabelValues(stream)
	for _, outcome := range []string{"dropped", "null"} {
		m.labelMisses.WithLabelValues(stream, outcome)
	}
	for _, g := range []*prometheus.GaugeVec{m.checkpointTime, m.backfillLeft} {
		g.WithLabelValues(stream)
	}
	for _, net := range networks {
		for _, g := range []*prometheus.GaugeVec{m.behindSource, m.committedBlock, m.behindHead} {
			g.WithLabelValues(stream, net)
		}
	}
}
