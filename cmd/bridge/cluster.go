package main

import (
	"context"
	"sync"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/cluster"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/health"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
)

// runCluster runs the process as a member of its cluster (cluster.enabled):
// the group decides which of the configuration's streams run here.
func (b *bridge) runCluster(ctx context.Context) error {
	byID := map[string]config.StreamConfig{}
	hs := map[string]*health.Stream{}
	var streams []cluster.Stream
	for _, sc := range b.cfg.Streams {
		byID[sc.ID] = sc
		hs[sc.ID] = b.health.Stream(sc.ID)
		streams = append(streams, cluster.Stream{ID: sc.ID, Weight: sc.Weight})
	}
	var mu sync.Mutex
	running := map[string]*pipeline.Stream{}
	m := cluster.New(cluster.Config{Group: b.cfg.Group(), Streams: streams, ReleaseTimeout: b.cfg.Cluster.ReleaseTimeout,
		BackfillWeight: b.cfg.Cluster.BackfillWeight, ReplicationFactor: int16(b.cfg.Kafka.ReplicationFactor),
		ExitOnStreamFailure: b.cfg.ExitOnStreamFailure},
		cluster.Deps{Logger: b.log, Registerer: b.reg, Kafka: b.kafka, Admin: b.admin,
			Run: func(ctx context.Context, id string) error {
				r := pipeline.New(byID[id], b.deps(id))
				mu.Lock()
				running[id] = r
				mu.Unlock()
				defer func() {
					mu.Lock()
					if running[id] == r {
						delete(running, id)
					}
					mu.Unlock()
				}()
				return r.Run(ctx)
			},
			Health: func(id string) cluster.Health { return hs[id] },
			Backfilling: func(id string) bool {
				mu.Lock()
				r := running[id]
				mu.Unlock()
				return r != nil && r.Backfilling()
			},
		})
	probed := make(chan struct{})
	pctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); <-probed }()
	go func() {
		defer close(probed)
		b.health.Probe(pctx, b.probes())
	}()
	return m.Run(ctx)
}
