package cluster

import "github.com/prometheus/client_golang/prometheus"

// metrics are a member's, under amp_bridge_cluster_.
type metrics struct {
	owned            *prometheus.GaugeVec
	weight           *prometheus.GaugeVec
	ownedCount       prometheus.Gauge
	generation       prometheus.Gauge
	rebalances       *prometheus.CounterVec
	rebalanceSeconds prometheus.Histogram
	releaseSeconds   prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	ns, sub := "amp_bridge", "cluster"
	m := &metrics{
		owned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "stream_owned",
			Help: "1 while this member owns the stream, else 0: exactly one member of a healthy cluster reports 1 per stream."}, []string{"stream"}),
		weight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "stream_weight",
			Help: "The weight this member reported for the stream at its last join (streams[].weight, times cluster.backfill_weight while it backfills here)."}, []string{"stream"}),
		ownedCount: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "owned_streams",
			Help: "How many streams this member owns."}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "generation",
			Help: "The group generation of this member's last assignment."}),
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rebalances_total",
			Help: "Rebalance callbacks by kind: assigned (a round ended), revoked (streams moved away), lost (the session ended), leaving."}, []string{"kind"}),
		rebalanceSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "rebalance_seconds",
			Help:    "From this member's release of streams (revoked or lost) to the end of the next round.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		releaseSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "release_seconds",
			Help:    "How long stopping the streams this member lost took (bounded by cluster.release_timeout).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
	}
	if reg != nil {
		reg.MustRegister(m.owned, m.weight, m.ownedCount, m.generation, m.rebalances, m.rebalanceSeconds, m.releaseSeconds)
	}
	return m
}
