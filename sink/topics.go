package sink

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TopicKind tells data topics from the control topic.
type TopicKind string

// Topic kinds.
const (
	TopicData    TopicKind = "data"
	TopicControl TopicKind = "control"
	// TopicCoordination is a cluster's coordination topic (group.go).
	TopicCoordination TopicKind = "coordination"
)

// KeyMode is how data records are keyed.
type KeyMode string

// Key modes of a data topic.
const (
	// KeyBatch (default) keys every record by its batch id: all rows of a
	// batch share one key, so the topic must not be compacted.
	KeyBatch KeyMode = "batch"
	// KeyRow keys records by configured row key columns; compaction
	// (compact,delete) is allowed and tombstones delete single rows.
	KeyRow KeyMode = "row"
)

// Cleanup policies accepted in TopicSpec.CleanupPolicy.
const (
	CleanupDelete        = "delete"
	CleanupCompactDelete = "compact,delete"
)

// TopicSpec describes a topic the bridge writes: how to create it when it
// is missing and what to check when it exists.
type TopicSpec struct {
	Name string
	Kind TopicKind
	// KeyMode applies to data topics ("" is KeyBatch); empty for the
	// control topic.
	KeyMode KeyMode
	// Partitions is used at creation (the control topic: 0 or 1).
	Partitions int32
	// ReplicationFactor is used at creation; -1 is the broker default.
	ReplicationFactor int16
	// CleanupPolicy is used at creation: "" means delete. A data topic in
	// row-key mode may use compact,delete; everything else must be delete.
	CleanupPolicy string
	// RetentionMs is retention.ms at creation: 0 is the kind's default (the
	// broker default for data topics, -1 = infinite for the control topic);
	// -1 is infinite.
	RetentionMs int64
	// Configs are further topic configs at creation (e.g.
	// min.insync.replicas). cleanup.policy and retention.ms go in the
	// fields above.
	Configs map[string]string
	// ExpectedPartitions is the partition count recorded when the stream
	// started (0: none recorded, a new stream). A different count on an
	// existing topic is an error.
	ExpectedPartitions int32
	// MustExist refuses to create the topic: a data topic that a stream
	// has committed records to is never created again, since the records
	// its checkpoint points at would be gone. A missing topic is a
	// *DataTopicLostError.
	MustExist bool
	// ExpectedID is the topic id the stream recorded ("": none): another id
	// is a *DataTopicLostError (the topic was recreated).
	ExpectedID string
	// CommittedEnd is, per partition, the offset after the last record the
	// stream committed to it (nil: none): a partition whose end offset
	// (high watermark) is below it is a *DataTopicLostError.
	CommittedEnd map[int32]int64
}

// TopicState is what EnsureTopics found or created.
type TopicState struct {
	Name       string
	Partitions int32
	Created    bool
	// ID is the topic's id as kafka-topics.sh prints it ("" if the broker
	// has no topic ids).
	ID string
	// CleanupPolicy and RetentionMs are the effective values.
	CleanupPolicy string
	RetentionMs   int64
	// MaxMessageBytes is the topic's max.message.bytes: the largest record
	// batch the brokers accept (0 when unknown).
	MaxMessageBytes int64
}

func (s TopicSpec) normalized() TopicSpec {
	if s.Kind == TopicData && s.KeyMode == "" {
		s.KeyMode = KeyBatch
	}
	if s.Kind == TopicControl && s.Partitions == 0 {
		s.Partitions = 1
	}
	if s.CleanupPolicy == "" {
		s.CleanupPolicy = CleanupDelete
	}
	s.CleanupPolicy = normalizePolicy(s.CleanupPolicy)
	if s.Kind == TopicControl && s.RetentionMs == 0 {
		s.RetentionMs = -1
	}
	return s
}

func normalizePolicy(p string) string {
	parts := strings.Split(strings.ReplaceAll(strings.ToLower(p), " ", ""), ",")
	slices.Sort(parts)
	return strings.Join(slices.Compact(parts), ",")
}

// Validate checks the spec itself (before talking to Kafka); errors name
// the topic, the field and the expected value.
func (s TopicSpec) Validate() error {
	n := s.normalized()
	var errs []error
	bad := func(problem, fix string) {
		errs = append(errs, &TopicError{Topic: s.Name, Problem: problem, Fix: fix})
	}
	if !legalName(s.Name, 249) {
		bad("name is not a legal Kafka topic name", "use 1-249 characters of [a-zA-Z0-9._-]")
	}
	switch n.Kind {
	case TopicData:
		switch n.KeyMode {
		case KeyBatch:
			if n.CleanupPolicy != CleanupDelete {
				bad(fmt.Sprintf("cleanup policy %q in batch-key mode: compaction keeps only the newest record per key, and all rows of a batch share its key", s.CleanupPolicy),
					"use cleanup policy delete, or key: row mode for a compacted topic")
			}
		case KeyRow:
			if n.CleanupPolicy != CleanupDelete && n.CleanupPolicy != CleanupCompactDelete {
				bad(fmt.Sprintf("cleanup policy %q", s.CleanupPolicy), "use delete or compact,delete")
			}
		default:
			bad(fmt.Sprintf("key mode %q", s.KeyMode), "use batch or row")
		}
	case TopicControl:
		if s.KeyMode != "" {
			bad("key mode set on the control topic", "remove it; it applies to data topics only")
		}
		if n.Partitions != 1 {
			bad(fmt.Sprintf("control topic with %d partitions", n.Partitions), "the control topic has exactly 1 partition")
		}
		if n.CleanupPolicy != CleanupDelete {
			bad(fmt.Sprintf("control topic cleanup policy %q", s.CleanupPolicy),
				"use delete with long or infinite retention: compaction would remove undo events and older watermarks that reconciliation reads")
		}
	case TopicCoordination:
		bad("a cluster's coordination topic", "use Admin.EnsureCoordinationTopic")
	default:
		bad(fmt.Sprintf("kind %q", s.Kind), "use data or control")
	}
	if n.Partitions < 1 {
		bad(fmt.Sprintf("partitions %d", s.Partitions), "set partitions >= 1")
	}
	if s.ReplicationFactor == 0 || s.ReplicationFactor < -1 {
		bad(fmt.Sprintf("replication factor %d", s.ReplicationFactor), "set -1 (broker default) or >= 1 (3 in production)")
	}
	if s.RetentionMs < -1 {
		bad(fmt.Sprintf("retention.ms %d", s.RetentionMs), "set -1 (infinite), 0 (default) or a positive number of milliseconds")
	}
	for k := range s.Configs {
		if k == "cleanup.policy" || k == "retention.ms" {
			bad("configs sets "+k, "use the CleanupPolicy / RetentionMs fields")
		}
	}
	if s.ExpectedPartitions < 0 {
		bad(fmt.Sprintf("expected partitions %d", s.ExpectedPartitions), "use 0 (none recorded) or the recorded count")
	}
	return errors.Join(errs...)
}

// Admin creates and validates topics and lists offsets.
type Admin struct {
	cl      *kgo.Client
	adm     *kadm.Client
	log     *slog.Logger
	brokers []string // for the operator's commands in errors
	cfg     Config   // for the principal and the ACL commands in errors
}

// NewAdmin creates an admin client. ctx bounds the first connection.
func NewAdmin(ctx context.Context, cfg Config, deps Deps) (*Admin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating kafka config: %w", err)
	}
	deps = deps.withDefaults()
	opts, err := cfg.clientOpts(deps.Logger)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka admin client: %w", err)
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, connectError(ctx, cfg, err)
	}
	return &Admin{cl: cl, adm: kadm.NewClient(cl), log: deps.Logger, brokers: cfg.Brokers, cfg: cfg}, nil
}

// Close closes the client.
func (a *Admin) Close() { a.cl.Close() }

// CheckTransactionTimeout compares a transaction timeout (the budget of
// one transaction: kafka.transaction_timeout, which bounds how long the
// bridge may take to publish a complete microbatch) with the broker's
// transaction.max.timeout.ms. Above it, the error wraps
// ErrTransactionTimeout and names both keys and values. A broker that does
// not say (an error, or no such key) passes: its answer to the producer id
// request is the check then.
func (a *Admin) CheckTransactionTimeout(ctx context.Context, timeout time.Duration) error {
	bm, err := a.adm.BrokerMetadata(ctx)
	if err != nil || len(bm.Brokers) == 0 {
		a.log.Debug("reading the brokers to check transaction.max.timeout.ms", "err", err)
		return nil
	}
	rcs, err := a.adm.DescribeBrokerConfigs(ctx, bm.Brokers[0].NodeID)
	if err != nil {
		a.log.Debug("describing the broker's configs to check transaction.max.timeout.ms", "err", err)
		return nil
	}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key != "transaction.max.timeout.ms" || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				return nil
			}
			if limit := time.Duration(ms) * time.Millisecond; timeout > limit {
				return fmt.Errorf("%w: kafka.transaction_timeout is %s and broker %d's transaction.max.timeout.ms is %s (%d): "+
					"lower kafka.transaction_timeout to at most %s, or raise transaction.max.timeout.ms on the brokers",
					ErrTransactionTimeout, timeout, bm.Brokers[0].NodeID, limit, ms, limit)
			}
			return nil
		}
	}
	return nil
}

// Ping asks a broker for the cluster's metadata: nil when one answers
// within ctx.
func (a *Admin) Ping(ctx context.Context) error {
	if err := a.cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka at %v: %w", a.brokers, err)
	}
	return nil
}

// WithLogger returns an Admin that shares a's client and logs its own lines
// (created topic, partition-count notes) to l: one Admin serves every
// stream, and the stream's logger says which stream a topic was created
// for. franz-go's own lines keep the logger a was created with. Close only
// the Admin NewAdmin returned.
func (a *Admin) WithLogger(l *slog.Logger) *Admin {
	c := *a
	c.log = l
	return &c
}

// EnsureTopics creates every missing topic of specs and validates every
// existing one. All problems are returned at once (errors.Join of
// *TopicError). States are in the order of specs.
func (a *Admin) EnsureTopics(ctx context.Context, specs ...TopicSpec) ([]TopicState, error) {
	var errs []error
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	md, err := a.adm.Metadata(ctx, names...)
	if err != nil {
		return nil, a.cfg.authError(fmt.Errorf("reading metadata of topics %v: %w", names, err), "reading metadata of topics", "", "", names...)
	}
	states := make([]TopicState, len(specs))
	for i, s := range specs {
		n := s.normalized()
		states[i].Name = s.Name
		if s.MustExist {
			// Uncached: kgo may answer a metadata request of the topic from
			// before its deletion.
			m, err := freshMetadata(ctx, a.cl, s.Name)
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return nil, &DataTopicLostError{Topic: s.Name, Missing: true, RecordedID: s.ExpectedID}
			}
			if err != nil {
				return nil, a.cfg.authError(err, fmt.Sprintf("reading metadata of topic %q", s.Name), "", "", s.Name)
			}
			states[i].Partitions, states[i].ID = int32(len(m.leaders)), topicIDString(m.id)
			if err := a.checkLost(ctx, n, states[i]); err != nil {
				return nil, err
			}
			continue
		}
		td, ok := md.Topics[s.Name]
		if ok && td.Err == nil {
			states[i].Partitions, states[i].ID = int32(len(td.Partitions)), topicIDString(td.ID)
			if err := a.checkLost(ctx, n, states[i]); err != nil {
				return nil, err
			}
			continue
		}
		if ok && td.Err != nil && !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
			// Without Describe (implied by Read or Write) Kafka answers
			// TOPIC_AUTHORIZATION_FAILED whether or not the topic exists.
			return nil, a.cfg.authError(fmt.Errorf("reading metadata of topic %q: %w", s.Name, td.Err),
				fmt.Sprintf("reading metadata of topic %q", s.Name), "", "", s.Name)
		}
		created, err := a.create(ctx, n)
		if err != nil {
			return nil, err
		}
		states[i].Created = created
		m, err := a.waitLeaders(ctx, s.Name)
		if err != nil {
			return nil, err
		}
		states[i].Partitions, states[i].ID = int32(len(m.leaders)), topicIDString(m.id)
	}
	rcs, err := a.adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return nil, a.cfg.authError(fmt.Errorf("describing configs of topics %v: %w", names, err),
			"describing configs of topics", OpDescribeConfigs, "", names...)
	}
	for i, s := range specs {
		n := s.normalized()
		rc, err := rcs.On(s.Name, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			return nil, a.cfg.authError(fmt.Errorf("describing config of topic %q: %w", s.Name, err),
				fmt.Sprintf("describing the config of topic %q", s.Name), OpDescribeConfigs, "", s.Name)
		}
		st := &states[i]
		st.CleanupPolicy, st.RetentionMs = CleanupDelete, 0
		for _, c := range rc.Configs {
			switch c.Key {
			case "cleanup.policy":
				st.CleanupPolicy = normalizePolicy(c.MaybeValue())
			case "retention.ms":
				st.RetentionMs, _ = strconv.ParseInt(c.MaybeValue(), 10, 64)
			case "max.message.bytes":
				st.MaxMessageBytes, _ = strconv.ParseInt(c.MaybeValue(), 10, 64)
			}
		}
		if err := a.check(n, *st); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return states, nil
}

func (a *Admin) create(ctx context.Context, s TopicSpec) (bool, error) {
	configs := map[string]*string{"cleanup.policy": &s.CleanupPolicy}
	if s.RetentionMs != 0 {
		v := strconv.FormatInt(s.RetentionMs, 10)
		configs["retention.ms"] = &v
		if s.RetentionMs == -1 {
			inf := "-1"
			configs["retention.bytes"] = &inf
		}
	}
	for k, v := range s.Configs {
		configs[k] = &v
	}
	resp, err := a.adm.CreateTopic(ctx, s.Partitions, s.ReplicationFactor, configs, s.Name)
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil:
		a.log.Info("created topic", "topic", s.Name, "kind", string(s.Kind), "partitions", s.Partitions,
			"replication_factor", s.ReplicationFactor, "cleanup_policy", s.CleanupPolicy, "retention", retentionText(s.RetentionMs))
		return true, nil
	case errors.Is(err, kerr.TopicAlreadyExists):
		return false, nil // created concurrently; validated below
	case errors.Is(err, kerr.InvalidReplicationFactor):
		return false, &TopicError{Topic: s.Name,
			Problem: fmt.Sprintf("the cluster cannot create it with replication factor %d (%v %s)", s.ReplicationFactor, err, resp.ErrMessage),
			Fix:     "set kafka.replication_factor to at most the number of brokers, or to -1 for the brokers' default.replication.factor"}
	case errors.Is(err, kerr.InvalidPartitions):
		key := "streams[].partitions"
		if s.Kind == TopicControl {
			key = "the control topic's partitions (1)"
		}
		return false, &TopicError{Topic: s.Name,
			Problem: fmt.Sprintf("the cluster cannot create it with %d partitions (%v %s)", s.Partitions, err, resp.ErrMessage),
			Fix:     "set " + key + " to a count the cluster allows"}
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		// Create on the topic, or on the cluster, allows it.
		return false, &AuthorizationError{Doing: fmt.Sprintf("creating topic %q", s.Name), Principal: a.cfg.Principal(),
			Missing:      ACL{Resource: ResourceTopic, Name: s.Name, Operation: OpCreate},
			Alternatives: []ACL{{Resource: ResourceCluster, Name: "kafka-cluster", Operation: OpCreate}},
			Bootstrap:    strings.Join(a.brokers, ","),
			Err:          fmt.Errorf("%w %s (or create the topic yourself with the partitions, cleanup.policy and retention the bridge expects)", err, resp.ErrMessage)}
	case errors.Is(err, kerr.PolicyViolation), errors.Is(err, kerr.InvalidConfig):
		return false, &TopicError{Topic: s.Name, Problem: fmt.Sprintf("the cluster refuses to create it: %v %s", err, resp.ErrMessage),
			Fix: "create the topic yourself with the partitions, cleanup.policy and retention the bridge expects, or grant CREATE on it"}
	default:
		msg := resp.ErrMessage
		return false, fmt.Errorf("creating topic %q (partitions %d, replication factor %d): %w %s",
			s.Name, s.Partitions, s.ReplicationFactor, err, msg)
	}
}

// checkLost compares an existing topic with what its stream recorded
// (ExpectedID, CommittedEnd) and returns a *DataTopicLostError when the
// topic is not the one the stream committed to.
func (a *Admin) checkLost(ctx context.Context, s TopicSpec, st TopicState) error {
	if s.ExpectedID != "" && st.ID != "" && st.ID != s.ExpectedID {
		return &DataTopicLostError{Topic: s.Name, RecordedID: s.ExpectedID, ID: st.ID}
	}
	if len(s.CommittedEnd) == 0 {
		return nil
	}
	ends, err := listOffsets(ctx, a.adm.ListEndOffsets, s.Name)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return &DataTopicLostError{Topic: s.Name, Missing: true, RecordedID: s.ExpectedID}
	}
	if err != nil {
		return a.cfg.authError(fmt.Errorf("checking the end offsets of topic %q against the stream's committed offsets: %w", s.Name, err),
			fmt.Sprintf("listing the offsets of topic %q", s.Name), "", "", s.Name)
	}
	for _, p := range slices.Sorted(maps.Keys(s.CommittedEnd)) {
		if end, ok := ends[p]; !ok || end < s.CommittedEnd[p] {
			if !ok {
				end = -1 // the partition is gone
			}
			return &DataTopicLostError{Topic: s.Name, RecordedID: s.ExpectedID, ID: st.ID, Partition: p, End: end, Committed: s.CommittedEnd[p]}
		}
	}
	return nil
}

// TopicID returns the id of topic now, as kafka-topics.sh prints it, from
// uncached metadata ("" if the broker has no topic ids). A missing topic is
// a *DataTopicLostError (Missing); the caller compares the id with the one
// it recorded.
func (a *Admin) TopicID(ctx context.Context, topic string) (string, error) {
	m, err := freshMetadata(ctx, a.cl, topic)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return "", &DataTopicLostError{Topic: topic, Missing: true}
	}
	if err != nil {
		return "", err
	}
	return topicIDString(m.id), nil
}

// topicIDString formats a topic id as Kafka's tools print it (URL-safe
// base64 without padding), "" for the zero id of a broker without ids.
func topicIDString(id [16]byte) string {
	if id == ([16]byte{}) {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// retentionText says what a topic's retention.ms at creation means: 0
// sets none, so the broker's log.retention.ms applies (logging
// retention_ms=0 read as "kept for no time"), -1 keeps records forever.
func retentionText(ms int64) string {
	switch {
	case ms == 0:
		return "broker default"
	case ms < 0:
		return "infinite"
	default:
		return (time.Duration(ms) * time.Millisecond).String()
	}
}

// waitLeaders waits until every partition of a new topic has a leader and
// returns its metadata.
func (a *Admin) waitLeaders(ctx context.Context, topic string) (topicMeta, error) {
	for {
		m, err := freshMetadata(ctx, a.cl, topic)
		if err == nil && len(m.leaders) > 0 && !slices.Contains(slices.Collect(maps.Values(m.leaders)), -1) {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return topicMeta{}, fmt.Errorf("waiting for leaders of new topic %q: %w", topic, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// check validates an existing topic against its spec.
func (a *Admin) check(s TopicSpec, st TopicState) error {
	var errs []error
	bad := func(problem, fix string) {
		errs = append(errs, &TopicError{Topic: s.Name, Problem: problem, Fix: fix})
	}
	compacted := slices.Contains(strings.Split(st.CleanupPolicy, ","), "compact")
	switch s.Kind {
	case TopicData:
		if s.KeyMode == KeyBatch && compacted {
			bad(fmt.Sprintf("cleanup.policy is %q but the stream keys records by batch id: compaction would keep only the last row of every batch", st.CleanupPolicy),
				fmt.Sprintf("set cleanup.policy=delete on the topic (kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config cleanup.policy=delete), or configure key: row", s.Name))
		}
	case TopicControl:
		if st.Partitions != 1 {
			bad(fmt.Sprintf("the control topic has %d partitions; it needs exactly 1 so that every stream's events are totally ordered and one offset locates them", st.Partitions),
				"create a new control topic with 1 partition and point the bridge at it (Kafka cannot remove partitions)")
		}
		if compacted {
			bad(fmt.Sprintf("the control topic's cleanup.policy is %q; compaction would delete undo events and older watermarks that reconciliation reads", st.CleanupPolicy),
				fmt.Sprintf("set cleanup.policy=delete and retention.ms=-1 on %s", s.Name))
		}
		if st.RetentionMs > 0 {
			a.log.Warn("control topic has finite retention: bridge rewind cannot reach behind its log start, and once a stream's newest full checkpoint copy expires (an idle stream's newest event) a lost checkpoint store cannot be rebuilt from Kafka; see the README on the control topic's retention",
				"topic", s.Name, "retention_ms", st.RetentionMs)
		}
	case TopicCoordination:
		// EnsureCoordinationTopic checks only its partition count.
	}
	if s.ExpectedPartitions > 0 && st.Partitions != s.ExpectedPartitions {
		bad(fmt.Sprintf("has %d partitions but the stream recorded %d when it started: keys now hash to other partitions, so retractions and tombstones would not land beside the rows they retract and recorded offset spans would point at the wrong partitions", st.Partitions, s.ExpectedPartitions),
			fmt.Sprintf("recreate the topic with %d partitions, or start the stream under a new id (or rewind it) so it begins afresh", s.ExpectedPartitions))
	} else if !st.Created && st.Partitions != s.Partitions {
		a.log.Info("existing topic has a different partition count than configured; using the existing count",
			"topic", s.Name, "partitions", st.Partitions, "configured", s.Partitions)
	}
	return errors.Join(errs...)
}

// EndOffsets returns, per partition of topic, the offset a read_committed
// consumer reads up to: the last stable offset (the high watermark when no
// transaction is open).
func (a *Admin) EndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	out, err := listOffsets(ctx, a.adm.ListCommittedOffsets, topic)
	return out, a.cfg.authError(err, fmt.Sprintf("listing the offsets of topic %q", topic), "", "", topic)
}

// StartOffsets returns, per partition of topic, the log start offset
// (records below it were deleted by retention or DeleteRecords).
func (a *Admin) StartOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	out, err := listOffsets(ctx, a.adm.ListStartOffsets, topic)
	return out, a.cfg.authError(err, fmt.Sprintf("listing the offsets of topic %q", topic), "", "", topic)
}

func listOffsets(ctx context.Context, fn func(context.Context, ...string) (kadm.ListedOffsets, error), topic string) (map[int32]int64, error) {
	wait := 10 * time.Millisecond
	// A missing topic is retriable too (metadata can lag a creation), but
	// only briefly: a deleted topic should fail fast, not at ReadTimeout.
	unknownUntil := time.Now().Add(time.Second)
	for {
		out, err := listOffsetsOnce(ctx, fn, topic)
		if err == nil || !kerr.IsRetriable(err) || ctx.Err() != nil ||
			(errors.Is(err, kerr.UnknownTopicOrPartition) && time.Now().After(unknownUntil)) {
			return out, err
		}
		// A leader election or a topic created a moment ago: retry.
		if serr := sleepCtx(ctx, wait); serr != nil {
			return nil, fmt.Errorf("%w (retrying: %w)", err, serr)
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

func listOffsetsOnce(ctx context.Context, fn func(context.Context, ...string) (kadm.ListedOffsets, error), topic string) (map[int32]int64, error) {
	lo, err := fn(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing offsets of topic %q: %w", topic, err)
	}
	ps, ok := lo[topic]
	if !ok {
		return nil, fmt.Errorf("listing offsets of topic %q: %w", topic, kerr.UnknownTopicOrPartition)
	}
	out := make(map[int32]int64, len(ps))
	for p, o := range ps {
		if o.Err != nil {
			return nil, fmt.Errorf("listing offsets of %s/%d: %w", topic, p, o.Err)
		}
		out[p] = o.Offset
	}
	return out, nil
}

// topicMeta is the uncached metadata of one topic.
type topicMeta struct {
	id      [16]byte
	leaders map[int32]int32 // partition -> leader (-1: none)
}

// freshMetadata asks the cluster for topic's metadata, bypassing kgo's
// metadata cache (which keeps a missing topic "missing" for MetadataMinAge).
// A missing topic returns kerr.UnknownTopicOrPartition.
func freshMetadata(ctx context.Context, cl *kgo.Client, topic string) (topicMeta, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return topicMeta{}, fmt.Errorf("requesting metadata of topic %q: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return topicMeta{}, fmt.Errorf("metadata of topic %q: %w", topic, err)
		}
		m := topicMeta{id: t.TopicID, leaders: make(map[int32]int32, len(t.Partitions))}
		for _, p := range t.Partitions {
			leader := p.Leader
			if kerr.ErrorForCode(p.ErrorCode) != nil {
				leader = -1
			}
			m.leaders[p.Partition] = leader
		}
		return m, nil
	}
	return topicMeta{}, fmt.Errorf("metadata of topic %q: %w", topic, kerr.UnknownTopicOrPartition)
}

// KeyPartition returns the partition a keyed record lands on in a topic with
// the given number of partitions: murmur2 of the key, as the Java client and
// this package's producer hash it. The run loop uses it at start to check
// that the retained batches of a batch-keyed topic still hash to the
// partitions they were written to: if the partition count changed under a
// running stream, retractions would land on other partitions than the rows
// they retract.
func KeyPartition(key []byte, partitions int32) int32 {
	if partitions <= 0 {
		return -1
	}
	p := kgo.StickyKeyPartitioner(nil).ForTopic("")
	return int32(p.Partition(&kgo.Record{Key: key}, int(partitions)))
}
