package config

import (
	"fmt"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// Cluster mode (README, "Cluster mode"): the cluster section and
// streams[].weight, their defaults and checks, kept apart from the other
// keys.

// ClusterConfig makes `bridge run` a member of a cluster of bridges that
// share the configuration's streams through a Kafka consumer group.
type ClusterConfig struct {
	// Enabled turns cluster mode on. Default false: the process runs every
	// stream itself.
	Enabled bool `yaml:"enabled"`
	// Group is the consumer group id the members join. Default
	// "{kafka.transactional_id_prefix}.cluster".
	Group string `yaml:"group"`
	// Topic is the coordination topic the bridge creates: one partition
	// per stream, compacted, holding each owner's claim. Default
	// "amp-kafka-bridge.cluster".
	Topic string `yaml:"topic"`
	// SessionTimeout is how long a member may go without a heartbeat
	// before its streams move to the others. Default 10s (the broker allows
	// group.min.session.timeout.ms, 6s, to group.max.session.timeout.ms).
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// HeartbeatInterval is the pause between heartbeats; at most a third
	// of session_timeout. Default 1s.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// RebalanceTimeout bounds a rebalance: how long a member may take to
	// release the streams it loses and rejoin. Default 60s.
	RebalanceTimeout time.Duration `yaml:"rebalance_timeout"`
	// ReleaseTimeout bounds how long a member waits for a stream it lost
	// to stop (its open transaction committed at a watermark, or aborted)
	// before it rejoins anyway; the new owner fences it. Default 30s, less
	// than rebalance_timeout.
	ReleaseTimeout time.Duration `yaml:"release_timeout"`
	// InstanceID makes the membership static (KIP-345): a member that
	// restarts under the same id within session_timeout gets its streams
	// back without a rebalance. Give every member its own (a StatefulSet's
	// pod name, BRIDGE_CLUSTER_INSTANCE_ID). Default "": dynamic.
	InstanceID string `yaml:"instance_id"`
	// BackfillWeight multiplies the weight of a stream while it backfills.
	// Default 4.
	BackfillWeight int `yaml:"backfill_weight"`
}

// defaultsCluster sets the cluster section's defaults.
func (c *Config) defaultsCluster() {
	cl := &c.Cluster
	setDefault(&cl.Topic, "amp-kafka-bridge.cluster")
	setDefault(&cl.SessionTimeout, 10*time.Second)
	setDefault(&cl.HeartbeatInterval, time.Second)
	setDefault(&cl.RebalanceTimeout, 60*time.Second)
	setDefault(&cl.ReleaseTimeout, 30*time.Second)
	setDefault(&cl.BackfillWeight, 4)
}

// defaultsClusterGroup sets the group's default, which depends on the
// transactional id prefix (known once the file is read).
func (c *Config) defaultsClusterGroup() {
	setDefault(&c.Cluster.Group, c.Kafka.TransactionalIDPrefix+".cluster")
}

// validateCluster checks the cluster section and the weights.
func (c *Config) validateCluster(bad func(key, format string, args ...any)) {
	for i, s := range c.Streams {
		if s.Weight < 0 {
			bad(fmt.Sprintf("streams[%d].weight", i), "%d: want a positive weight (default 1)", s.Weight)
		}
	}
	cl := c.Cluster
	if !cl.Enabled {
		return
	}
	if cl.Group == "" {
		bad("cluster.group", "empty: want a consumer group id")
	}
	if !sinkLegalTopic(cl.Topic) {
		bad("cluster.topic", "%q: want a Kafka topic name ([a-zA-Z0-9._-], at most 249)", cl.Topic)
	}
	if cl.Topic == c.Kafka.ControlTopic {
		bad("cluster.topic", "%q is the control topic: give the coordination topic its own name", cl.Topic)
	}
	if c.Checkpoint.Store != StoreRedis {
		bad("cluster.enabled", "needs checkpoint.store: redis: the members share every stream's checkpoint, and a file store is one machine's")
	}
	if c.Kafka.Delivery != sink.DeliveryExactlyOnce {
		bad("cluster.enabled", "needs kafka.delivery: exactly-once: a new owner fences the old one through the stream's transactional id, which at-least-once does not use")
	}
	if cl.SessionTimeout < 6*time.Second {
		bad("cluster.session_timeout", "%s: want at least 6s (Kafka's default group.min.session.timeout.ms)", cl.SessionTimeout)
	}
	if cl.HeartbeatInterval <= 0 || cl.HeartbeatInterval*3 > cl.SessionTimeout {
		bad("cluster.heartbeat_interval", "%s: want more than 0 and at most a third of cluster.session_timeout (%s)", cl.HeartbeatInterval, cl.SessionTimeout)
	}
	if cl.ReleaseTimeout <= 0 || cl.ReleaseTimeout >= cl.RebalanceTimeout {
		bad("cluster.release_timeout", "%s: want more than 0 and less than cluster.rebalance_timeout (%s), or the coordinator drops a member still releasing its streams",
			cl.ReleaseTimeout, cl.RebalanceTimeout)
	}
	if cl.BackfillWeight < 1 {
		bad("cluster.backfill_weight", "%d: want at least 1", cl.BackfillWeight)
	}
}

// Group returns the cluster's membership configuration.
func (c *Config) Group() sink.GroupConfig {
	cl := c.Cluster
	return sink.GroupConfig{Group: cl.Group, Topic: cl.Topic, SessionTimeout: cl.SessionTimeout, RebalanceTimeout: cl.RebalanceTimeout,
		HeartbeatInterval: cl.HeartbeatInterval, InstanceID: cl.InstanceID}
}
