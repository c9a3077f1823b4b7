package sink

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// TestIntegrationClusterACLs runs a cluster member on a real broker with
// KRaft's StandardAuthorizer, its principal holding only ClusterACLs (the
// README's "Cluster mode" lines): it creates the coordination topic,
// grows it, joins the group, is given its items and records claims that
// DescribeCluster reads back. Then each ACL is left out in turn, under a
// principal of its own, and the step that needs it fails naming it (a
// refused claim ends Group.Run): so the list is both enough and the least.
func TestIntegrationClusterACLs(t *testing.T) {
	const password = "s3cret-Pw"
	cases := []struct {
		name string
		// drop is the operation left out, on the resource type resource.
		drop, resource string
	}{
		{name: "all"},
		{name: "no-group-read", drop: OpRead, resource: ResourceGroup},
		{name: "no-topic-create", drop: OpCreate, resource: ResourceTopic},
		{name: "no-topic-alter", drop: OpAlter, resource: ResourceTopic},
		{name: "no-topic-write", drop: OpWrite, resource: ResourceTopic},
		{name: "no-topic-read", drop: OpRead, resource: ResourceTopic},
	}
	users := map[string]string{}
	for _, c := range cases {
		users["member-"+c.name] = password
	}
	k := testenv.StartKafkaBroker(t, testenv.WithSecurity(testenv.SecurityConfig{SASL: "SCRAM-SHA-512", Users: users, Authorizer: true}))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(k.Addr())
			cfg.SASL = SASLConfig{Mechanism: SASLScramSHA512, Username: "member-" + c.name, Password: password}
			gc := GroupConfig{Group: testenv.UniqueName(t, "acl-group"), Topic: testenv.UniqueName(t, "acl-coord"),
				SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second, HeartbeatInterval: time.Second}
			// The bridge's principal also writes its data and control
			// topics (RequiredACLs): Write on any topic lets its claims'
			// idempotent producer initialise (KIP-679).
			var grant []testenv.ACL
			for _, a := range RequiredACLs(cfg, false, testenv.UniqueName(t, "acl-data")) {
				grant = append(grant, testenv.ACL(a))
			}
			for _, a := range ClusterACLs(gc, true) {
				if a.Operation == c.drop && a.Resource == c.resource {
					continue
				}
				grant = append(grant, testenv.ACL(a))
			}
			require.Len(t, grant, len(RequiredACLs(cfg, false, "x"))+len(ClusterACLs(gc, true))-min(len(c.drop), 1),
				"the case must leave out one of ClusterACLs")
			k.Grant(cfg.Principal(), grant...)
			runClusterMember(t, cfg, gc, c.drop, c.resource)
		})
	}
}

// runClusterMember takes a member through every step that needs an ACL
// and checks that only the step of the dropped one fails, naming it.
func runClusterMember(t *testing.T, cfg Config, gc GroupConfig, drop, resource string) {
	t.Helper()
	ctx := testCtx(t)
	adm := newAdmin(t, cfg)
	want := func(err error, op, res string) {
		t.Helper()
		require.ErrorIs(t, err, ErrNotAuthorized)
		var ae *AuthorizationError
		require.ErrorAs(t, err, &ae)
		assert.Equal(t, op, ae.Missing.Operation, "the error must name the missing ACL: %v", err)
		assert.Equal(t, res, ae.Missing.Resource, "the error must name the missing ACL: %v", err)
		assert.Contains(t, err.Error(), "kafka-acls.sh")
	}

	err := adm.EnsureCoordinationTopic(ctx, gc.Topic, 2, -1)
	if drop == OpCreate {
		want(err, OpCreate, ResourceTopic)
		return
	}
	require.NoError(t, err, "creating the coordination topic")
	err = adm.EnsureCoordinationTopic(ctx, gc.Topic, 3, -1)
	if drop == OpAlter {
		want(err, OpAlter, ResourceTopic)
		return
	}
	require.NoError(t, err, "growing the coordination topic")

	items := []GroupItem{{ID: "a", Weight: 1}, {ID: "b", Weight: 1}, {ID: "c", Weight: 1}}
	assigned := make(chan []string, 4)
	logs := &claimLog{failed: make(chan string, 1)}
	g, err := JoinGroup(cfg, gc, func() []GroupItem { return items },
		func(ms []GroupMember) map[string][]string {
			out := map[string][]string{}
			for _, m := range ms {
				out[m.ID] = nil
			}
			out[ms[0].ID] = []string{"a", "b", "c"}
			return out
		},
		GroupHandler{
			Assigned: func(_ context.Context, _ Generation, ids []string) {
				if len(ids) > 0 {
					assigned <- ids
				}
			},
			Revoked: func(context.Context, []string) {},
			Lost:    func(context.Context, []string) {},
		}, Deps{Logger: slog.New(logs)})
	require.NoError(t, err)
	defer g.Close()
	runErr := make(chan error, 1)
	go func() { runErr <- g.Run(ctx) }()

	if drop == OpRead && resource == ResourceGroup {
		select {
		case err := <-runErr:
			want(err, OpRead, ResourceGroup)
		case ids := <-assigned:
			t.Fatalf("joined the group without Read on it: given %v", ids)
		case <-ctx.Done():
			t.Fatal("the member neither joined nor stopped on the group's refusal")
		}
		return
	}
	// The leader places as many items as its metadata shows partitions:
	// right after the growth that may be one round short of all three.
	var owned []string
	for len(owned) < len(items) {
		select {
		case ids := <-assigned:
			owned = append(owned, ids...)
		case err := <-runErr:
			t.Fatalf("the member stopped: %v", err)
		case <-ctx.Done():
			t.Fatalf("given only %v", owned)
		}
	}
	slices.Sort(owned)
	assert.Equal(t, []string{"a", "b", "c"}, owned)

	if drop == OpWrite {
		// A refused claim is permanent: Run ends on it (bridge run exits).
		select {
		case err := <-runErr:
			want(err, OpWrite, ResourceTopic)
		case msg := <-logs.failed:
			t.Fatalf("a refused claim must end Run, not be logged: %s", msg)
		case <-ctx.Done():
			t.Fatal("the claims were written without Write on the coordination topic")
		}
		return
	}

	r := newReader(t, cfg)
	for {
		st, err := adm.DescribeCluster(ctx, gc, r)
		if drop == OpRead {
			// Until the claims are written there is nothing to fetch;
			// then the fetch is refused.
			if err != nil {
				assert.Contains(t, err.Error(), "TOPIC_AUTHORIZATION_FAILED")
				return
			}
			require.Empty(t, st.Claims, "the claims were read without Read on the coordination topic")
		} else {
			require.NoError(t, err)
		}
		require.Len(t, st.Members, 1)
		assert.Equal(t, []string{"a", "b", "c"}, st.Members[0].Owns)
		if len(st.Claims) == 3 {
			for _, id := range []string{"a", "b", "c"} {
				assert.Equal(t, st.Members[0].ID, st.Claims[id].Member, "claim of %s", id)
			}
			break
		}
		select {
		case msg := <-logs.failed:
			t.Fatalf("recording the claims failed: %s", msg)
		case <-ctx.Done():
			t.Fatalf("the claims never showed: %v", st.Claims)
		case <-time.After(100 * time.Millisecond):
		}
	}
	require.NoError(t, g.Leave(ctx))
}

// claimLog is a slog.Handler that reports the member's failure to record
// its claims (with the error), and drops everything else.
type claimLog struct {
	once   sync.Once
	failed chan string
}

func (*claimLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *claimLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "recording this member's streams") {
		return nil
	}
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	h.once.Do(func() { h.failed <- b.String() })
	return nil
}

func (h *claimLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *claimLog) WithGroup(string) slog.Handler      { return h }
