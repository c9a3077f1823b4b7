package ops

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// ClusterStatus is what `bridge status` says of a cluster (cluster mode):
// the group as its coordinator describes it, and who owns each stream.
type ClusterStatus struct {
	// Group and Topic are the cluster's group and coordination topic.
	Group, Topic string
	// State is the group's state (Stable, PreparingRebalance,
	// CompletingRebalance, Empty, Dead) and Protocol its balancer.
	State, Protocol string
	// Members are the group's live members, each with what it owns.
	Members []sink.ClusterMember
	// Streams are the configuration's streams, in its order.
	Streams []StreamOwner
}

// StreamOwner is who runs a stream of a cluster.
type StreamOwner struct {
	// Stream is the stream's id.
	Stream string
	// Weight is the stream's weight as its owner reported it at its last
	// join (streams[].weight, times cluster.backfill_weight while it
	// backfills there); without an owner, the highest any member reported,
	// else the configured weight.
	Weight int
	// Owner is the live member the group assigned the stream to; nil when
	// none did.
	Owner *sink.ClusterMember
	// Generation and Since are the generation of the owner's last claim
	// and since when it owns the stream; zero while the owner has not
	// recorded a claim yet.
	Generation int32
	Since      time.Time
	// Hostname is the owner's host name, from its claim.
	Hostname string
	// Stale is the newest claim when its member no longer owns the stream
	// (it left the group, or the stream moved): a past owner.
	Stale *sink.Claim
	// StaleWhy says why Stale is stale.
	StaleWhy string
	// NoOwner says why no live member owns the stream ("" when one does).
	NoOwner string
	// Workers are the owners of the stream's backfill workers (cluster
	// items of their own, "{stream}#backfill.{k}"; Stream is the item).
	Workers []StreamOwner
}

// Cluster describes cluster gc's group and its claims (sink.Admin's
// DescribeCluster) and says who owns each of streams: the live member the
// group assigned it to, with the generation and time of that member's
// claim; a claim whose member is not in the group, or no longer owns the
// stream, is stale. An error of Kafka is returned (a missing ACL as a
// *sink.AuthorizationError naming it).
func Cluster(ctx context.Context, adm *sink.Admin, r *sink.Reader, gc sink.GroupConfig, streams []config.StreamConfig) (ClusterStatus, error) {
	st, err := adm.DescribeCluster(ctx, gc, r)
	if err != nil {
		return ClusterStatus{}, fmt.Errorf("reading the cluster's ownership: %w", err)
	}
	return clusterStatus(st, gc, streams), nil
}

// clusterStatus cross-checks st's claims with its live assignment.
func clusterStatus(st sink.ClusterState, gc sink.GroupConfig, streams []config.StreamConfig) ClusterStatus {
	out := ClusterStatus{Group: gc.Group, Topic: gc.Topic, State: st.State, Protocol: st.Protocol, Members: st.Members}
	for _, sc := range streams {
		so := itemOwner(st, gc, sc.ID, max(sc.Weight, 1))
		// The stream's other items (its backfill workers,
		// "{stream}#backfill.{k}": '#' is not legal in a stream id).
		workers := map[string]bool{}
		for _, m := range st.Members {
			for _, it := range m.Items {
				if strings.HasPrefix(it.ID, sc.ID+"#") {
					workers[it.ID] = true
				}
			}
		}
		for id := range st.Claims {
			if strings.HasPrefix(id, sc.ID+"#") {
				workers[id] = true
			}
		}
		for _, id := range slices.Sorted(maps.Keys(workers)) {
			so.Workers = append(so.Workers, itemOwner(st, gc, id, 0))
		}
		out.Streams = append(out.Streams, so)
	}
	return out
}

// itemOwner says who owns cluster item id (a stream, or one of its
// backfill workers) of configured weight.
func itemOwner(st sink.ClusterState, gc sink.GroupConfig, id string, weight int) StreamOwner {
	so := StreamOwner{Stream: id, Weight: weight}
	reported, knows := -1, false // knows: some member's configuration has the item
	for i := range st.Members {
		m := &st.Members[i]
		for _, it := range m.Items {
			if it.ID == id {
				knows = true
				reported = max(reported, it.Weight)
			}
		}
		if slices.Contains(m.Owns, id) && so.Owner == nil {
			so.Owner = m
		}
	}
	if reported >= 0 {
		so.Weight = reported
	}
	if so.Owner != nil {
		for _, it := range so.Owner.Items {
			if it.ID == id {
				so.Weight = it.Weight // the owner's report wins
			}
		}
	}
	if c, ok := st.Claims[id]; ok {
		switch m := liveMember(st, c.Member); {
		case so.Owner != nil && c.Member == so.Owner.ID:
			so.Generation, so.Since, so.Hostname = c.Generation, c.Since, c.Host
		case m == nil:
			so.Stale, so.StaleWhy = &c, "its member is no longer in the group"
		default:
			so.Stale, so.StaleWhy = &c, "its member is in the group but no longer owns the stream"
		}
	}
	if so.Owner == nil {
		so.NoOwner = noOwner(st, gc, knows)
	}
	return so
}

// liveMember returns the member of st with id, nil when it is not in the
// group.
func liveMember(st sink.ClusterState, id string) *sink.ClusterMember {
	for i := range st.Members {
		if st.Members[i].ID == id {
			return &st.Members[i]
		}
	}
	return nil
}

// noOwner says why no live member owns a stream.
func noOwner(st sink.ClusterState, gc sink.GroupConfig, knows bool) string {
	switch {
	case len(st.Members) == 0 && st.NoTopic:
		return fmt.Sprintf("no member of cluster group %q has run yet (coordination topic %q does not exist): start `bridge run` with cluster.enabled",
			gc.Group, gc.Topic)
	case len(st.Members) == 0:
		return fmt.Sprintf("no member of cluster group %q is running (group state %s): start `bridge run` with cluster.enabled", gc.Group, st.State)
	case st.State == "PreparingRebalance" || st.State == "CompletingRebalance":
		return fmt.Sprintf("cluster group %q is rebalancing (state %s): a member takes the stream at the end of the round", gc.Group, st.State)
	case !knows:
		return fmt.Sprintf("no member of cluster group %q has the stream in its configuration: every member must run the same streams", gc.Group)
	default:
		return fmt.Sprintf("no live member of cluster group %q was assigned it (the coordination topic %q may have fewer partitions than there are streams; a member grows it at its start)",
			gc.Group, gc.Topic)
	}
}

// Owner returns the stream's owner record by id (ok false for a stream not
// in the configuration).
func (c ClusterStatus) Owner(stream string) (StreamOwner, bool) {
	for _, s := range c.Streams {
		if s.Stream == stream {
			return s, true
		}
	}
	return StreamOwner{}, false
}

// WriteText writes the group and its members for people (bridge status).
func (c ClusterStatus) WriteText(w io.Writer) {
	fmt.Fprintf(w, "cluster group %s: state %s, protocol %s, %d member(s); coordination topic %s\n",
		c.Group, c.State, orNone(c.Protocol), len(c.Members), c.Topic)
	for _, m := range c.Members {
		owns := "nothing (standby)"
		if len(m.Owns) > 0 {
			owns = strings.Join(m.Owns, ", ")
		}
		fmt.Fprintf(w, "  member %s: owns %s\n", memberText(m), owns)
	}
}

// WriteText writes the stream's owner line (bridge status).
func (s StreamOwner) WriteText(w io.Writer) {
	switch {
	case s.Owner != nil && s.Since.IsZero():
		fmt.Fprintf(w, "%s: owner member %s, weight %d; its claim (generation, since) is not recorded yet\n", s.Stream, memberText(*s.Owner), s.Weight)
	case s.Owner != nil:
		on := ""
		if s.Hostname != "" {
			on = " on " + s.Hostname
		}
		fmt.Fprintf(w, "%s: owner member %s%s, generation %d, since %s, weight %d\n", s.Stream, memberText(*s.Owner), on,
			s.Generation, s.Since.Format(time.RFC3339), s.Weight)
	default:
		fmt.Fprintf(w, "%s: no owner: %s (weight %d)\n", s.Stream, s.NoOwner, s.Weight)
	}
	for _, wk := range s.Workers {
		fmt.Fprint(w, "  backfill worker ")
		wk.WriteText(w)
	}
	if c := s.Stale; c != nil {
		fmt.Fprintf(w, "  stale claim: member %s (instance %s, host %s), generation %d, since %s, recorded %s: %s\n",
			c.Member, orNone(c.Instance), orNone(c.Host), c.Generation, c.Since.Format(time.RFC3339), c.At.Format(time.RFC3339), s.StaleWhy)
	}
}

// memberText names a member: its id, instance id, host and client id.
func memberText(m sink.ClusterMember) string {
	return fmt.Sprintf("%s (instance %s, host %s, client %s)", m.ID, orNone(m.InstanceID), orNone(m.Host), orNone(m.ClientID))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
