package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// clusterUsers are the SASL users of clusterSecure.
func clusterUsers() []string {
	users := []string{"cluster", "cluster-status"}
	for i := range sink.ClusterACLs(sink.GroupConfig{}, true) {
		users = append(users, fmt.Sprintf("cluster-acl%d", i))
	}
	return users
}

// secureCluster is a clusterHarness of streams on the secured broker as
// user (SCRAM-SHA-512 over TLS), its principal granted sink.RequiredACLs
// and sink.ClusterACLs for its names, minus those drop says to leave out.
func secureCluster(t *testing.T, k *testenv.KafkaBroker, base services, user string, streams int, drop func(sink.ACL) bool) *harness {
	t.Helper()
	svc := secureModes[2].services(k, base, user, nil)
	svc.prepare = nil
	h := clusterHarness(t, svc, streams)
	// Transactional ids of its own: harnesses of other principals run
	// beside it.
	h.cfg.Kafka.TransactionalIDPrefix = strings.TrimSuffix(h.cfg.Cluster.Group, ".cluster")
	scfg := h.cfg.Sink()
	topics := []string{h.cfg.Kafka.ControlTopic}
	for _, sc := range h.cfg.Streams {
		topics = append(topics, sc.Topic)
	}
	var grant []testenv.ACL
	for _, a := range append(sink.RequiredACLs(scfg, true, topics...), sink.ClusterACLs(h.cfg.Group(), true)...) {
		if drop == nil || !drop(a) {
			grant = append(grant, testenv.ACL(a))
		}
	}
	k.Grant(scfg.Principal(), grant...)
	return h
}

// clusterSecure runs cluster mode on the real broker with the
// StandardAuthorizer, its principals holding only the ACLs
// sink.RequiredACLs and sink.ClusterACLs list: bridge status of two
// members (clusterStatusReal), each cluster ACL removed in turn
// (clusterACLs), and bridge status of a principal without Describe on the
// group, then with Describe alone.
func clusterSecure(t *testing.T, k *testenv.KafkaBroker, base services) {
	t.Run("status", func(t *testing.T) {
		t.Parallel()
		clusterStatusReal(t, secureCluster(t, k, base, "cluster", 3, nil))
	})
	t.Run("acls", func(t *testing.T) {
		t.Parallel()
		clusterACLs(t, k, base)
	})
	t.Run("status-without-group-describe", func(t *testing.T) {
		t.Parallel()
		h := secureCluster(t, k, base, "cluster-status", 1, func(a sink.ACL) bool { return a.Resource == sink.ResourceGroup })
		b, err := newBridge(t.Context(), h.cfg, testLogger())
		require.NoError(t, err)
		defer b.close()
		_, err = b.clusterStatus(t.Context())
		t.Logf("status without group Describe: %v", err)
		want := sink.ACL{Resource: sink.ResourceGroup, Name: h.cfg.Cluster.Group, Operation: sink.OpDescribe}
		requireNamedACL(t, err, "User:cluster-status", h.cfg.Kafka.Brokers[0], want)
		// Describe is all bridge status needs on the group (not Read).
		k.Grant("User:cluster-status", testenv.ACL(want))
		st, err := b.clusterStatus(t.Context())
		require.NoError(t, err, "with Describe on the group")
		assert.Contains(t, st.Streams[0].NoOwner, "no member of cluster group")
	})
}

// requireNamedACL checks err is the permanent *sink.AuthorizationError
// that names want, principal and the kafka-acls.sh command granting it.
func requireNamedACL(t *testing.T, err error, principal, bootstrap string, want sink.ACL) {
	t.Helper()
	require.ErrorIs(t, err, sink.ErrNotAuthorized, "without %s", want)
	assert.True(t, pipeline.Permanent(err), "a missing ACL is permanent: %v", err)
	assert.NotErrorIs(t, err, sink.ErrFenced)
	assert.Contains(t, err.Error(), "principal "+principal+" has no ACL for "+want.String())
	assert.Contains(t, err.Error(), "`"+want.Command(bootstrap, principal)+"`")
}

// clusterStatusReal: bridge status of two members on the real broker
// names every stream's owner with its claim, agrees with what each member
// runs, and follows a member that leaves.
func clusterStatusReal(t *testing.T, h *harness) {
	var ids []string
	for _, sc := range h.cfg.Streams {
		ids = append(ids, sc.ID)
	}
	stop0, b0 := h.runBridge()
	stop1, b1 := h.runBridge()
	sb, err := newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	defer sb.close()
	agree := func(bs ...*bridge) func() bool {
		return func() bool {
			st, err := sb.clusterStatus(t.Context())
			if err != nil {
				t.Logf("status (retried): %v", err) // e.g. the group coordinator still loading
				return false
			}
			if st.State != "Stable" || len(st.Members) != len(bs) {
				return false
			}
			for _, so := range st.Streams {
				if so.Owner == nil || so.Generation == 0 {
					return false
				}
			}
			for _, id := range ids {
				if n := owners(bs, []string{id})[id]; n != 1 {
					return false
				}
			}
			var out strings.Builder
			st.WriteText(&out)
			for _, so := range st.Streams {
				so.WriteText(&out)
			}
			t.Log(out.String())
			return true
		}
	}
	require.Eventually(t, agree(b0, b1), 60*time.Second, 200*time.Millisecond, "two members own every stream once, and their claims are recorded")
	h.waitAllHead(ids)
	require.NoError(t, stop0())
	require.Eventually(t, agree(b1), 60*time.Second, 200*time.Millisecond, "the remaining member owns every stream")
	st, err := sb.clusterStatus(t.Context())
	require.NoError(t, err)
	require.Len(t, st.Members, 1)
	for _, so := range st.Streams {
		assert.Equal(t, st.Members[0].ID, so.Owner.ID, "stream %s", so.Stream)
		assert.Equal(t, 1, int(gaugeOf(b1, so.Stream)), "stream %s", so.Stream)
	}
	require.NoError(t, stop1())
	st, err = sb.clusterStatus(t.Context())
	require.NoError(t, err)
	assert.Empty(t, st.Members)
	for _, so := range st.Streams {
		assert.Nil(t, so.Owner)
		assert.NotEmpty(t, so.NoOwner)
		if assert.NotNil(t, so.Stale, "stream %s", so.Stream) {
			assert.Equal(t, "its member is no longer in the group", so.StaleWhy)
		}
	}
}

// clusterACLs proves sink.ClusterACLs minimal on the real broker: with
// each removed in turn (a principal of its own), `bridge run` in cluster
// mode stops at once on the permanent *sink.AuthorizationError naming it,
// the principal and the kafka-acls.sh command, instead of retrying: Read
// on the group (the group's JoinGroup), Write on the coordination topic
// (the member's claims), Create on it and Alter (growing a topic made
// with too few partitions). Read on the coordination topic
// is bridge status's (it reads the claims; a member needs only the
// Describe it implies, which Write implies too): without it the member
// runs, and bridge status stops on the error naming it.
func clusterACLs(t *testing.T, k *testenv.KafkaBroker, base services) {
	probe := newHarnessConfig(t)
	for i, missing := range sink.ClusterACLs(probe.Group(), true) {
		t.Run(fmt.Sprintf("without-%s-%s", missing.Operation, missing.Resource), func(t *testing.T) {
			t.Parallel()
			user := fmt.Sprintf("cluster-acl%d", i)
			// The cluster's group and coordination topic are both named
			// "{stream}.cluster" (clusterHarness).
			h := secureCluster(t, k, base, user, 1, func(a sink.ACL) bool {
				return a.Resource == missing.Resource && a.Operation == missing.Operation && strings.HasSuffix(a.Name, ".cluster")
			})
			want := missing
			want.Name = h.cfg.Cluster.Topic
			if want.Resource == sink.ResourceGroup {
				want.Name = h.cfg.Cluster.Group
			}
			principal, bootstrap := "User:"+user, h.cfg.Kafka.Brokers[0]
			if want.Operation == sink.OpAlter {
				// A coordination topic with too few partitions (streams
				// added since it was made): the member grows it.
				compact := "compact"
				resp, err := k.Admin().CreateTopic(t.Context(), 1, 1, map[string]*string{"cleanup.policy": &compact}, h.cfg.Cluster.Topic)
				require.NoError(t, err)
				require.NoError(t, resp.Err)
			}
			start := time.Now()
			err := h.runClusterUntil(t)
			t.Logf("run without %s: after %s: %v", want, time.Since(start).Round(time.Millisecond), err)
			if want.Resource == sink.ResourceTopic && want.Operation == sink.OpRead {
				require.NoError(t, err, "a member needs no Read on the coordination topic")
				b, err := newBridge(t.Context(), h.cfg, testLogger())
				require.NoError(t, err)
				defer b.close()
				_, err = b.clusterStatus(t.Context())
				t.Logf("status without %s: %v", want, err)
				requireNamedACL(t, err, principal, bootstrap, want)
				return
			}
			requireNamedACL(t, err, principal, bootstrap, want)
		})
	}
}

// runClusterUntil runs one member until it stops by itself (its error)
// or every stream committed the simulator's head and a few seconds more
// passed (nil: it needed nothing it lacks).
func (h *harness) runClusterUntil(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	b := h.newBridge(ctx)
	defer b.close()
	done := make(chan error, 1)
	go func() { done <- b.run(ctx) }()
	head, _ := h.sim.Head()
	var ok time.Time
	for {
		select {
		case err := <-done:
			return err
		case <-time.After(50 * time.Millisecond):
		}
		h.mu.Lock()
		all := true
		for _, sc := range h.cfg.Streams {
			all = all && h.lastOf[sc.ID] >= head
		}
		h.mu.Unlock()
		switch {
		case all && ok.IsZero():
			ok = time.Now()
		case !ok.IsZero() && time.Since(ok) > 2*time.Second:
			cancel()
			return <-done
		}
	}
}
