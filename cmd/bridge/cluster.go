package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/cluster"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/health"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
)

// workerSep joins a stream id and a backfill worker's index in the id of
// the worker's cluster item ("{stream}#backfill.{k}"): '#' is not legal in
// a stream id, so the two never collide.
const workerSep = "#backfill."

// workerItem returns the cluster item of backfill worker k of stream id.
func workerItem(id string, k int) string { return id + workerSep + strconv.Itoa(k) }

// parseItem splits a cluster item into its stream id and, for a backfill
// worker, its index (k -1: the stream itself).
func parseItem(item string) (id string, k int) {
	id, ks, ok := strings.Cut(item, workerSep)
	if !ok {
		return item, -1
	}
	k, err := strconv.Atoi(ks)
	if err != nil {
		return item, -1
	}
	return id, k
}

// runCluster runs the process as a member of its cluster (cluster.enabled):
// the group decides which of the configuration's streams, and of their
// backfill workers, run here.
func (b *bridge) runCluster(ctx context.Context) error {
	byID := map[string]config.StreamConfig{}
	hs := map[string]*health.Stream{}
	var items []cluster.Stream
	for _, sc := range b.cfg.Streams {
		byID[sc.ID] = sc
		hs[sc.ID] = b.health.Stream(sc.ID)
		items = append(items, cluster.Stream{ID: sc.ID, Weight: sc.Weight})
		if sc.Backfill.Enabled {
			for k := range sc.Backfill.Workers {
				// Idle until its stream backfills: weight 0 (then the
				// stream's weight times cluster.backfill_weight).
				items = append(items, cluster.Stream{ID: workerItem(sc.ID, k), Weight: 0, Busy: sc.Weight})
			}
		}
	}
	var mu sync.Mutex
	running := map[string]*pipeline.Stream{}
	// live are the streams a run here has seen go live: their backfill
	// workers are idle wherever they run, for good (a rewind reaches back
	// to the hand-over at most).
	live := map[string]bool{}
	seenLive := func(id string) bool { // under mu
		if live[id] {
			return true
		}
		for item, r := range running {
			if sid, _ := parseItem(item); sid == id && r.GoneLive() {
				live[id] = true
				return true
			}
		}
		return false
	}
	m := cluster.New(cluster.Config{Group: b.cfg.Group(), Streams: items, ReleaseTimeout: b.cfg.Cluster.ReleaseTimeout,
		BackfillWeight: b.cfg.Cluster.BackfillWeight, ReplicationFactor: int16(b.cfg.Kafka.ReplicationFactor),
		ExitOnStreamFailure: b.cfg.ExitOnStreamFailure},
		cluster.Deps{Logger: b.log, Registerer: b.reg, Kafka: b.kafka, Admin: b.admin, Crashed: b.clusterCrashed,
			Run: func(ctx context.Context, item string) error {
				id, k := parseItem(item)
				sc, ok := byID[id]
				if !ok {
					return fmt.Errorf("cluster item %q names no stream of this configuration", item)
				}
				deps := b.deps(id)
				deps.ClusterBackfill = true
				if k >= 0 {
					// A worker reports to nobody's /readyz: its stream's owner
					// does.
					deps.Health = nil
				}
				r := pipeline.New(sc, deps)
				mu.Lock()
				running[item] = r
				mu.Unlock()
				defer func() {
					mu.Lock()
					if running[item] == r {
						delete(running, item)
					}
					if r.GoneLive() {
						live[id] = true
					}
					mu.Unlock()
				}()
				if k >= 0 {
					return r.RunBackfillWorker(ctx, k)
				}
				return r.Run(ctx)
			},
			Health: func(item string) cluster.Health {
				if h, ok := hs[item]; ok {
					return h
				}
				return noHealth{}
			},
			Backfilling: func(item string) bool {
				if _, k := parseItem(item); k < 0 {
					return false // the owner of a cluster backfill only waits
				}
				mu.Lock()
				r := running[item]
				mu.Unlock()
				return r != nil && r.Backfilling()
			},
			Idle: func(item string) bool {
				id, k := parseItem(item)
				if k < 0 {
					return false
				}
				mu.Lock()
				defer mu.Unlock()
				return seenLive(id)
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

// noHealth is the cluster.Health of an item that is not a stream (a
// backfill worker).
type noHealth struct{}

func (noHealth) Standby(string)  {}
func (noHealth) Starting(string) {}
func (noHealth) Calls() []string { return nil }
