package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Cluster membership (README, "Cluster mode"): the bridges of one cluster
// join a Kafka consumer group on a coordination topic, and the group's
// leader decides which member owns which item (a stream). Kafka's group
// protocol carries the decision; the transactional id's epoch, which the
// new owner's producer takes, is what fences the old one.
//
// An item owned by a member is one partition of the coordination topic, its
// slot: the leader chooses a free slot when it assigns an item and keeps it
// while the item stays with its owner, and each member's assignment says
// which item each of its slots is. franz-go's cooperative protocol then does
// the rest: an item planned away from its owner is left out of the round's
// plan, its owner sees the slot gone, stops the item (GroupHandler.Revoked)
// and rejoins, and the next round gives it to its new member. Nothing
// else moves, and nothing stops during a rebalance.

// groupProtocol names the balancer in JoinGroup; every member of a cluster
// speaks it.
const groupProtocol = "amp-bridge-weighted-v1"

// GroupConfig configures a bridge's membership of its cluster.
type GroupConfig struct {
	// Group is the consumer group id the members join.
	Group string
	// Topic is the coordination topic: one partition per item slot. The
	// bridge creates it (EnsureCoordinationTopic).
	Topic string
	// SessionTimeout is how long the coordinator waits for a member's
	// heartbeat before it gives the member's items to the others.
	SessionTimeout time.Duration
	// RebalanceTimeout bounds a rebalance: how long a member may take to
	// release what it lost and rejoin.
	RebalanceTimeout time.Duration
	// HeartbeatInterval is the pause between heartbeats.
	HeartbeatInterval time.Duration
	// InstanceID, when set, makes the membership static (KIP-345): a
	// member that restarts under the same id within SessionTimeout gets its
	// items back without a rebalance.
	InstanceID string
}

// GroupItem is a unit of work the members share, with its weight now.
type GroupItem struct {
	// ID names the item (a stream id).
	ID string `json:"id"`
	// Weight is its share of a member's load (0: it adds none, as an idle
	// backfill worker).
	Weight int `json:"w"`
	// Known marks a weight the member knows rather than assumes (an idle
	// backfill worker of a stream it has seen go live): a planner prefers
	// it to the assumptions of members that do not know. Members of
	// earlier versions never set it.
	Known bool `json:"k,omitempty"`
}

// GroupMember is one member of a rebalance, as the leader sees it.
type GroupMember struct {
	// ID is the member id the coordinator gave it; InstanceID its static
	// id ("" when dynamic).
	ID, InstanceID string
	// Items are the items it can run, with their weights.
	Items []GroupItem
	// Owned are the items it runs now.
	Owned []string
}

// GroupPlanner decides who owns what: given the members, it returns the
// items each member id should own. Items moving from one member to another
// are then held back for one round (the cooperative protocol), so the plan
// need not care.
type GroupPlanner func(members []GroupMember) map[string][]string

// Generation is a member's identity in one generation of its group.
type Generation struct {
	MemberID   string
	Generation int32
}

// GroupHandler is told of changes of ownership; its calls are serial (the
// group's management goroutine) and block the member's rejoin while they
// run.
type GroupHandler struct {
	// Assigned gives the items added to the member in generation g; every
	// call, even with no items, completes a rebalance.
	Assigned func(ctx context.Context, g Generation, items []string)
	// Revoked takes items away: it must stop them before it returns
	// (bounded by the rebalance timeout).
	Revoked func(ctx context.Context, items []string)
	// Lost takes items away after the member's session ended (its
	// heartbeat was late, or it was fenced): another member may run them
	// already.
	Lost func(ctx context.Context, items []string)
}

// memberMeta is a member's JoinGroup user data.
type memberMeta struct {
	V     int               `json:"v"`
	Items []GroupItem       `json:"items"`
	Owned map[string]string `json:"owned,omitempty"` // slot → item
}

// assignmentMeta is a member's SyncGroup user data: which item each of its
// slots is.
type assignmentMeta struct {
	V     int               `json:"v"`
	Slots map[string]string `json:"slots"` // slot → item
}

// Group is a member of a cluster.
type Group struct {
	cl    *kgo.Client
	cfg   GroupConfig
	kcfg  Config
	log   *slog.Logger
	bal   *groupBalancer
	h     GroupHandler
	host  string
	leave sync.Once
	// abandon cancels the client's context (Abandon).
	abandon context.CancelFunc
	// since is when the member took each item it owns, for its claims.
	mu    sync.Mutex
	since map[string]time.Time
	now   func() time.Time
	// failed receives the first permanent error of a claim's write (a
	// missing Write on the coordination topic), which ends Run.
	failed chan error
}

// JoinGroup makes the process a member of gc.Group: items says what it can
// run (called at every join, so weights may change), plan decides as leader,
// h is told of what it gains and loses. The coordination topic must exist.
func JoinGroup(cfg Config, gc GroupConfig, items func() []GroupItem, plan GroupPlanner, h GroupHandler, deps Deps) (*Group, error) {
	deps = deps.withDefaults()
	opts, err := cfg.clientOpts(deps.Logger)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	g := &Group{cfg: gc, kcfg: cfg, log: deps.Logger, h: h, host: host, since: map[string]time.Time{}, now: deps.Now,
		failed: make(chan error, 1)}
	cctx, abandon := context.WithCancel(context.Background())
	g.abandon = abandon
	g.bal = &groupBalancer{topic: gc.Topic, items: items, plan: plan, log: deps.Logger, cur: map[int32]string{}, next: map[int32]string{}}
	opts = append(opts,
		kgo.ConsumerGroup(gc.Group),
		kgo.ConsumeTopics(gc.Topic),
		kgo.Balancers(g.bal),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(gc.SessionTimeout),
		kgo.RebalanceTimeout(gc.RebalanceTimeout),
		kgo.HeartbeatInterval(gc.HeartbeatInterval),
		kgo.OnPartitionsAssigned(g.assigned),
		kgo.OnPartitionsRevoked(g.revoked),
		kgo.OnPartitionsLost(g.lost),
		kgo.WithContext(cctx),
	)
	if gc.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(gc.InstanceID))
	}
	if g.cl, err = kgo.NewClient(opts...); err != nil {
		abandon()
		return nil, fmt.Errorf("joining cluster group %q: %w", gc.Group, err)
	}
	// The slots are never read: membership is all they are for.
	g.cl.PauseFetchTopics(gc.Topic)
	return g, nil
}

// Rejoin asks the group for a new round, after the items' weights changed.
func (g *Group) Rejoin() { g.cl.ForceRebalance() }

// Leave releases every item (Revoked) and leaves the group, so that the
// others take them over at once instead of after the session timeout. It
// is bounded by ctx; Close must still be called.
func (g *Group) Leave(ctx context.Context) error {
	var err error
	g.leave.Do(func() {
		err = g.cl.LeaveGroupContext(ctx)
	})
	if err != nil {
		return fmt.Errorf("leaving cluster group %q: %w", g.cfg.Group, err)
	}
	return nil
}

// Close closes the client (leaving the group if Leave was not called).
func (g *Group) Close() {
	g.cl.Close()
	g.abandon()
}

// Abandon closes the client without telling the coordinator, as a process
// that crashed: the member stays in the group, owning its items, until its
// session times out. It is for tests that crash a member in process; the
// caller stops the items itself.
func (g *Group) Abandon() {
	// With the client's context canceled, no request goes out any more,
	// the LeaveGroup of Close included.
	g.abandon()
	g.cl.Close()
}

// Run watches the membership until ctx ends or the client closes: errors
// of the group session are logged (kgo retries them), except those that
// cannot fix themselves, which Run returns: a principal without Read on the
// group (an *AuthorizationError naming the ACL), without Describe on the
// coordination topic, or without Write on it (the member's claims). kgo
// reports the group's errors as fetch errors (PollFetches), the claims'
// through their own produce.
func (g *Group) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case err := <-g.failed:
			cancel(err)
		case <-ctx.Done():
		}
	}()
	for {
		fs := g.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			if err := context.Cause(ctx); errors.Is(err, ErrNotAuthorized) {
				return err
			}
			return nil
		}
		if fs.IsClientClosed() {
			return nil
		}
		for _, fe := range fs.Errors() {
			if err := g.permanent(fe.Err); err != nil {
				return err
			}
			g.log.Warn("cluster group session", "group", g.cfg.Group, "err", fe.Err)
		}
	}
}

// permanent returns the error an operator must fix, or nil.
func (g *Group) permanent(err error) error {
	switch {
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return &AuthorizationError{Doing: fmt.Sprintf("joining cluster group %q", g.cfg.Group), Principal: g.kcfg.Principal(),
			Missing: ACL{Resource: ResourceGroup, Name: g.cfg.Group, Operation: OpRead}, Bootstrap: strings.Join(g.kcfg.Brokers, ","), Err: err}
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		// The group's metadata and offset fetches of the coordination
		// topic need Describe, which Read or Write implies.
		return &AuthorizationError{Doing: fmt.Sprintf("joining cluster group %q on coordination topic %q", g.cfg.Group, g.cfg.Topic),
			Principal: g.kcfg.Principal(), Missing: ACL{Resource: ResourceTopic, Name: g.cfg.Topic, Operation: OpRead},
			Alternatives: []ACL{{Resource: ResourceTopic, Name: g.cfg.Topic, Operation: OpDescribe}},
			Bootstrap:    strings.Join(g.kcfg.Brokers, ","), Err: err}
	}
	return nil
}

func (g *Group) assigned(ctx context.Context, cl *kgo.Client, added map[string][]int32) {
	ids := g.bal.take(added[g.cfg.Topic])
	id, gen := cl.GroupMetadata()
	g.h.Assigned(ctx, Generation{MemberID: id, Generation: gen}, ids)
	g.claim(ctx, Generation{MemberID: id, Generation: gen}, ids)
}

func (g *Group) revoked(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	if ids := g.bal.drop(lost[g.cfg.Topic]); len(ids) > 0 {
		g.forget(ids)
		g.h.Revoked(ctx, ids)
	}
}

func (g *Group) lost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	if ids := g.bal.drop(lost[g.cfg.Topic]); len(ids) > 0 {
		g.forget(ids)
		g.h.Lost(ctx, ids)
	}
}

func (g *Group) forget(ids []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, id := range ids {
		delete(g.since, id)
	}
}

// Claim is a member's record of an item it owns, in the coordination
// topic (keyed by the item, so that compaction keeps the newest): what
// `bridge status` shows beside the group's own description.
type Claim struct {
	Item       string    `json:"item"`
	Member     string    `json:"member"`
	Instance   string    `json:"instance,omitempty"`
	Host       string    `json:"host,omitempty"`
	Generation int32     `json:"generation"`
	Since      time.Time `json:"since"`
	At         time.Time `json:"at"`
}

// claim records, after a round, every item the member owns with the
// round's generation. It does not hold the rebalance up (ownership is the
// group's, not the claims'), and a failed write is a log line, except a
// refused Write ACL, which cannot fix itself: Run returns it.
func (g *Group) claim(ctx context.Context, gen Generation, added []string) {
	now := g.now()
	g.mu.Lock()
	for _, id := range added {
		g.since[id] = now
	}
	var recs []*kgo.Record
	for _, id := range slices.Sorted(maps.Keys(g.since)) {
		v, _ := json.Marshal(Claim{Item: id, Member: gen.MemberID, Instance: g.cfg.InstanceID, Host: g.host,
			Generation: gen.Generation, Since: g.since[id], At: now})
		recs = append(recs, &kgo.Record{Topic: g.cfg.Topic, Key: []byte(id), Value: v})
	}
	g.mu.Unlock()
	if len(recs) == 0 {
		return
	}
	go func() {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err := g.cl.ProduceSync(pctx, recs...).FirstErr()
		if err == nil {
			return
		}
		if err := g.kcfg.authError(err, fmt.Sprintf("recording this member's streams in coordination topic %q (for bridge status)", g.cfg.Topic),
			OpWrite, "", g.cfg.Topic); errors.Is(err, ErrNotAuthorized) {
			select {
			case g.failed <- err:
			default:
			}
			return
		}
		g.log.Warn("recording this member's streams in the coordination topic (for bridge status)", "topic", g.cfg.Topic, "err", err)
	}()
}

// EnsureCoordinationTopic creates the coordination topic with partitions
// partitions (one per slot), or grows an existing one that has fewer.
// Claims are keyed by stream, so it is compacted.
func (a *Admin) EnsureCoordinationTopic(ctx context.Context, name string, partitions int32, replication int16) error {
	md, err := a.adm.Metadata(ctx, name)
	if err != nil {
		return a.cfg.authError(fmt.Errorf("reading metadata of coordination topic %q: %w", name, err), "reading metadata of topics", "", "", name)
	}
	td, ok := md.Topics[name]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		if _, err := a.create(ctx, TopicSpec{Name: name, Kind: TopicCoordination, Partitions: partitions, ReplicationFactor: replication,
			CleanupPolicy: "compact"}); err != nil {
			return err
		}
		_, err := a.waitLeaders(ctx, name)
		return err
	}
	if td.Err != nil {
		return a.cfg.authError(fmt.Errorf("reading metadata of coordination topic %q: %w", name, td.Err), "reading metadata of topics", "", "", name)
	}
	if have := int32(len(td.Partitions)); have < partitions {
		return a.growCoordinationTopic(ctx, name, have, partitions)
	}
	return nil
}

// growCoordinationTopic adds partitions to the coordination topic, which
// has have. The per-topic error of the response is the one that matters
// (kadm's On with a nil callback does not return it): a refusal is an
// *AuthorizationError naming Alter on the topic, and another member that
// grew it first (InvalidPartitions) is success.
func (a *Admin) growCoordinationTopic(ctx context.Context, name string, have, partitions int32) error {
	doing := fmt.Sprintf("growing coordination topic %q from %d to %d partitions (one per stream)", name, have, partitions)
	resp, err := a.adm.UpdatePartitions(ctx, int(partitions), name)
	if err == nil {
		err = resp.Error()
	}
	switch {
	case err == nil:
		a.log.Info("grew the coordination topic: one partition per stream", "topic", name, "from", have, "to", partitions)
	case errors.Is(err, kerr.InvalidPartitions):
		md, merr := a.adm.Metadata(ctx, name)
		if merr != nil || int32(len(md.Topics[name].Partitions)) < partitions {
			return fmt.Errorf("%s: %w", doing, err)
		}
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return &AuthorizationError{Doing: doing, Principal: a.cfg.Principal(),
			Missing: ACL{Resource: ResourceTopic, Name: name, Operation: OpAlter}, Bootstrap: strings.Join(a.brokers, ","),
			Err: fmt.Errorf("%w (or grow the topic yourself to %d partitions)", err, partitions)}
	default:
		return fmt.Errorf("%s: %w", doing, err)
	}
	// Until the brokers' metadata shows the new partitions, a leader
	// planning a round would place fewer streams.
	for {
		m, err := a.waitLeaders(ctx, name)
		if err != nil {
			return err
		}
		if int32(len(m.leaders)) >= partitions {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for the new partitions' leaders: %w", doing, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ClusterMember is a live member of a cluster group.
type ClusterMember struct {
	ID, InstanceID, ClientID, Host string
	// Items are what it can run, with their weights, as it joined.
	Items []GroupItem
	// Owns are the items the group assigned it.
	Owns []string
}

// ClusterState is a cluster group as the coordinator describes it, with the
// members' claims.
type ClusterState struct {
	Group    string
	State    string
	Protocol string
	Members  []ClusterMember
	// Claims are the newest claim per item.
	Claims map[string]Claim
	// NoTopic is set when the coordination topic does not exist (no
	// member has run yet).
	NoTopic bool
}

// DescribeCluster describes group gc.Group and reads gc.Topic's claims.
func (a *Admin) DescribeCluster(ctx context.Context, gc GroupConfig, r *Reader) (ClusterState, error) {
	var d kadm.DescribedGroup
	var err error
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		var gs kadm.DescribedGroups
		gs, err = a.adm.DescribeGroups(ctx, gc.Group)
		d = gs[gc.Group]
		if err == nil {
			err = d.Err
		}
		// The group coordinator of a new cluster (its __consumer_offsets
		// being created) or a moved one answers in a moment.
		if err == nil || !kerr.IsRetriable(err) || ctx.Err() != nil {
			break
		}
		if serr := sleepCtx(ctx, wait); serr != nil {
			err = fmt.Errorf("%w (retrying: %w)", err, serr)
			break
		}
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		// Kafka 4's coordinator: no member ever joined (or the group
		// expired). Older ones answer state Dead.
		d, err = kadm.DescribedGroup{Group: gc.Group, State: "Dead"}, nil
	}
	if err != nil {
		// kadm returns a refused FindCoordinator or DescribeGroups as
		// its error, a refusal of the group alone in d.Err.
		if errors.Is(err, kerr.GroupAuthorizationFailed) {
			return ClusterState{}, &AuthorizationError{Doing: fmt.Sprintf("describing cluster group %q", gc.Group), Principal: a.cfg.Principal(),
				Missing:      ACL{Resource: ResourceGroup, Name: gc.Group, Operation: OpDescribe},
				Alternatives: []ACL{{Resource: ResourceGroup, Name: gc.Group, Operation: OpRead}},
				Bootstrap:    strings.Join(a.brokers, ","), Err: err}
		}
		return ClusterState{}, fmt.Errorf("describing cluster group %q: %w", gc.Group, err)
	}
	st := ClusterState{Group: gc.Group, State: d.State, Protocol: d.Protocol, Claims: map[string]Claim{}}
	for _, m := range d.Members {
		cm := ClusterMember{ID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost}
		if m.InstanceID != nil {
			cm.InstanceID = *m.InstanceID
		}
		if j, ok := m.Join.AsConsumer(); ok {
			var um memberMeta
			if json.Unmarshal(j.UserData, &um) == nil {
				cm.Items = um.Items
			}
		}
		if as, ok := m.Assigned.AsConsumer(); ok {
			var am assignmentMeta
			if json.Unmarshal(as.UserData, &am) == nil {
				cm.Owns = slices.Sorted(maps.Values(am.Slots))
			}
		}
		st.Members = append(st.Members, cm)
	}
	starts, err := r.StartOffsets(ctx, gc.Topic)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		st.NoTopic = true // no member has run yet: no claims
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("reading coordination topic %q: %w", gc.Topic, err)
	}
	ends, err := r.highWatermarks(ctx, gc.Topic)
	if err != nil {
		return st, fmt.Errorf("reading coordination topic %q: %w", gc.Topic, err)
	}
	var read [][]ReadRecord
	for p, end := range ends {
		if from := starts[p]; end > from {
			recs, err := r.fetchRange(ctx, gc.Topic, p, from, end)
			if err != nil {
				return st, fmt.Errorf("reading coordination topic %q partition %d: %w", gc.Topic, p, err)
			}
			read = append(read, recs)
		}
	}
	for _, recs := range read {
		for _, rec := range recs {
			var c Claim
			if rec.Value == nil || json.Unmarshal(rec.Value, &c) != nil {
				continue
			}
			if old, ok := st.Claims[c.Item]; !ok || c.At.After(old.At) {
				st.Claims[c.Item] = c
			}
		}
	}
	return st, nil
}

// groupBalancer is the kgo.GroupBalancer of a cluster: kgo's consumer
// protocol metadata, with the member's items in its user data, and a
// cooperative plan from the GroupPlanner.
type groupBalancer struct {
	topic string
	items func() []GroupItem
	plan  GroupPlanner
	log   *slog.Logger

	mu sync.Mutex
	// cur is what the member owns: slot → item; next is the latest
	// assignment's, from which Assigned takes the added slots.
	cur, next map[int32]string
}

// take moves the added slots from the latest assignment into what the
// member owns and returns their items.
func (b *groupBalancer) take(slots []int32) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(slots))
	for _, s := range slots {
		if id, ok := b.next[s]; ok {
			b.cur[s] = id
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// drop removes slots from what the member owns and returns their items.
func (b *groupBalancer) drop(slots []int32) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(slots))
	for _, s := range slots {
		if id, ok := b.cur[s]; ok {
			delete(b.cur, s)
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (*groupBalancer) ProtocolName() string { return groupProtocol }
func (*groupBalancer) IsCooperative() bool  { return true }

func (b *groupBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	um := memberMeta{V: 1, Items: b.items(), Owned: map[string]string{}}
	b.mu.Lock()
	for _, topic := range slices.Sorted(maps.Keys(current)) {
		op := kmsg.NewConsumerMemberMetadataOwnedPartition()
		op.Topic, op.Partitions = topic, current[topic]
		meta.OwnedPartitions = append(meta.OwnedPartitions, op)
		if topic == b.topic {
			for _, s := range current[topic] {
				// The latest assignment's name first: kgo may rejoin before
				// Assigned has taken the slots it added.
				id, ok := b.next[s]
				if !ok {
					id, ok = b.cur[s]
				}
				if ok {
					um.Owned[strconv.Itoa(int(s))] = id
				}
			}
		}
	}
	b.mu.Unlock()
	meta.UserData, _ = json.Marshal(um)
	return meta.AppendTo(nil)
}

func (b *groupBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(assignment); err != nil {
		return nil, fmt.Errorf("reading the cluster assignment: %w", err)
	}
	var am assignmentMeta
	if len(a.UserData) > 0 {
		if err := json.Unmarshal(a.UserData, &am); err != nil {
			return nil, fmt.Errorf("reading the cluster assignment's slots: %w", err)
		}
	}
	next := map[int32]string{}
	out := map[string][]int32{}
	for _, t := range a.Topics {
		out[t.Topic] = append(out[t.Topic], t.Partitions...)
	}
	for s, id := range am.Slots {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("reading the cluster assignment: slot %q: %w", s, err)
		}
		next[int32(n)] = id
	}
	b.mu.Lock()
	b.next = next
	b.mu.Unlock()
	return out, nil
}

func (b *groupBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(b, members)
	if err != nil {
		return nil, nil, err
	}
	return cb, cb.MemberTopics(), nil
}

// claim is a member's claim on a slot, from its JoinGroup metadata.
type claim struct {
	member string
	gen    int32
	item   string
}

// Balance plans the round (the leader only).
func (b *groupBalancer) Balance(cb *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	slots := topics[b.topic]
	var members []GroupMember
	byID := map[string]*kmsg.JoinGroupResponseMember{}
	// The newest claim on each slot and on each item wins: a member that
	// missed rounds may still claim what another owns now (KIP-792).
	slotClaim := map[int32]claim{}
	itemClaim := map[string]claim{}
	used := map[int32]bool{} // a slot someone holds is never given to another item this round
	cb.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		for _, op := range meta.OwnedPartitions {
			if op.Topic == b.topic {
				for _, s := range op.Partitions {
					used[s] = true
				}
			}
		}
		var um memberMeta
		if err := json.Unmarshal(meta.UserData, &um); err != nil {
			b.log.Warn("a cluster member sent metadata this bridge cannot read; it gets no streams", "member", m.MemberID, "err", err)
		}
		gm := GroupMember{ID: m.MemberID, Items: um.Items}
		if m.InstanceID != nil {
			gm.InstanceID = *m.InstanceID
		}
		members = append(members, gm)
		byID[m.MemberID] = m
		for s, id := range um.Owned {
			n, err := strconv.ParseInt(s, 10, 32)
			if err != nil {
				continue
			}
			c := claim{member: m.MemberID, gen: meta.Generation, item: id}
			if old, ok := slotClaim[int32(n)]; !ok || c.gen > old.gen {
				slotClaim[int32(n)] = c
			}
			if old, ok := itemClaim[id]; !ok || c.gen > old.gen {
				itemClaim[id] = c
			}
		}
	})
	owner := map[string]string{} // item → member that owns it now
	slotOf := map[string]int32{}
	for s, c := range slotClaim {
		if ic := itemClaim[c.item]; ic.member == c.member && ic.gen == c.gen {
			owner[c.item], slotOf[c.item] = c.member, s
		}
	}
	for i := range members {
		for id, m := range owner {
			if m == members[i].ID {
				members[i].Owned = append(members[i].Owned, id)
			}
		}
		slices.Sort(members[i].Owned)
	}
	want := b.plan(members)

	for s := range slotClaim {
		used[s] = true
	}
	free := int32(0)
	nextFree := func() (int32, bool) {
		for ; free < slots; free++ {
			if !used[free] {
				used[free] = true
				return free, true
			}
		}
		return 0, false
	}
	plan := cb.NewPlan()
	assigned := map[string]map[string]string{} // member → slot → item
	var unplaced []string
	for _, mid := range slices.Sorted(maps.Keys(want)) {
		m, ok := byID[mid]
		if !ok {
			continue
		}
		assigned[mid] = map[string]string{}
		for _, id := range want[mid] {
			if o, owned := owner[id]; owned && o != mid {
				continue // its owner releases it first; the next round places it
			}
			s, kept := slotOf[id]
			if _, owned := owner[id]; !owned || !kept {
				var ok bool
				if s, ok = nextFree(); !ok {
					unplaced = append(unplaced, id)
					continue
				}
			}
			plan.AddPartition(m, b.topic, s)
			assigned[mid][strconv.Itoa(int(s))] = id
		}
	}
	if len(unplaced) > 0 {
		b.log.Warn("the coordination topic has too few partitions for every stream; these wait for a member that grows it",
			"topic", b.topic, "partitions", slots, "unplaced", unplaced)
	}
	plan.AdjustCooperative(cb)
	out := make(syncAssignments, 0, len(want))
	for mid, tps := range plan.AsMemberIDMap() {
		a := kmsg.NewConsumerMemberAssignment()
		am := assignmentMeta{V: 1, Slots: map[string]string{}}
		for topic, parts := range tps {
			t := kmsg.NewConsumerMemberAssignmentTopic()
			t.Topic, t.Partitions = topic, slices.Sorted(slices.Values(parts))
			a.Topics = append(a.Topics, t)
			if topic == b.topic {
				for _, s := range parts {
					if id, ok := assigned[mid][strconv.Itoa(int(s))]; ok {
						am.Slots[strconv.Itoa(int(s))] = id
					}
				}
			}
		}
		a.UserData, _ = json.Marshal(am)
		sa := kmsg.NewSyncGroupRequestGroupAssignment()
		sa.MemberID, sa.MemberAssignment = mid, a.AppendTo(nil)
		out = append(out, sa)
	}
	slices.SortFunc(out, func(x, y kmsg.SyncGroupRequestGroupAssignment) int {
		if x.MemberID < y.MemberID {
			return -1
		}
		if x.MemberID > y.MemberID {
			return 1
		}
		return 0
	})
	return out
}

// syncAssignments is a finished plan.
type syncAssignments []kmsg.SyncGroupRequestGroupAssignment

func (s syncAssignments) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment { return s }
