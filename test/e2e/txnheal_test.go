package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// coordRecord is one __transaction_state record.
type coordRecord struct {
	partition int32 // of __transaction_state: its leader epoch is the coordinator epoch
	offset    int64
	id        string
	v         kmsg.TxnMetadataValue
}

// has reports whether the record lists topic/partition among the
// transaction's partitions.
func (r coordRecord) has(topic string, partition int32) bool {
	for _, t := range r.v.Topics {
		if t.Topic == topic && slices.Contains(t.Partitions, partition) {
			return true
		}
	}
	return false
}

// hanging is a transaction a partition holds open although its coordinator
// has finished it: the broker bug the harness works around (see
// healHangingTxns).
type hanging struct {
	topic     string
	partition int32
	pid       int64
	epoch     int16 // the epoch of the open transaction's records
	startOff  int64
	decision  coordRecord // the coordinator's Prepare{Commit,Abort}
	complete  coordRecord // and its Complete{Commit,Abort}
}

func (h hanging) committed() bool { return h.decision.v.State == kmsg.TransactionStatePrepareCommit }

func (h hanging) String() string {
	res := "ABORT"
	if h.committed() {
		res = "COMMIT"
	}
	return fmt.Sprintf("%s/%d open from offset %d: producer id %d epoch %d of transactional id %s, which its coordinator decided to %s "+
		"(__transaction_state/%d offset %d) and recorded complete (offset %d) without writing the marker here",
		h.topic, h.partition, h.startOff, h.pid, h.epoch, h.decision.id, res, h.decision.partition, h.decision.offset, h.complete.offset)
}

// healHangingTxns finds and ends the transactions on topics that the broker
// left hanging, and returns what it did, one line per marker written.
//
// A single-node KRaft broker restarted after kill -9 loads its metadata
// image, in which it still leads every partition, and its transaction
// coordinator starts to finish the transactions it had prepared
// (PrepareCommit or PrepareAbort, the window between EndTxn and the
// markers). Seconds later the controller fences the killed incarnation: the
// partitions have no leader, and the coordinator's marker sender takes a
// partition without a leader for a deleted one ("Couldn't find leader
// endpoint ... likely deleted already and hence can be skipped"), drops its
// marker and completes the transaction (CompleteCommit in
// __transaction_state). The records stay in an open transaction on the
// partition for ever: the last stable offset never passes them, and a new
// InitProducerID of the transactional id does not help because the
// coordinator has nothing ongoing. TestIntegrationBrokerKill9InsideEndTxn
// reproduces it with franz-go alone, with transaction protocol 1 and 2.
//
// It acts only on a partition whose open transaction the coordinator has
// finished: in __transaction_state the transaction's Ongoing record lists
// the partition and is followed by a Prepare record that lists it and the
// matching Complete record, and the id's newest record is that Complete
// record or an Empty one (a new producer initialised since); and, checked again just before the marker is
// written, the partition still holds the same open transaction (producer
// id, epoch, start offset) and the coordinator (DescribeTransactions) has
// nothing in flight for the transactional id (CompleteCommit, CompleteAbort
// or Empty, same producer id). A legitimately ongoing transaction fails the
// last check, so it is never touched. The partition gets the marker the
// coordinator decided, with the coordinator's epoch (the leader epoch of
// its __transaction_state partition), as the coordinator would have written
// it: a producer cannot cause this state, so healing it hides no bridge
// bug. (A producer could still begin a new transaction on the partition in
// the milliseconds between the last check and the marker; the harness
// calls this with the bridge stopped, except once right after the broker
// restart, when the bridge is reconnecting.)
func healHangingTxns(brokers []string, topics ...string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	hs, err := findHanging(ctx, cl, topics)
	if err != nil || len(hs) == 0 {
		return nil, err
	}
	adm := kadm.NewClient(cl)
	md, err := adm.Metadata(ctx, "__transaction_state")
	if err != nil {
		return nil, fmt.Errorf("reading the coordinator's epoch: %w", err)
	}
	var done []string
	for _, h := range hs {
		// The marker carries the coordinator's epoch: the leader epoch of
		// the __transaction_state partition that holds the transactional
		// id. The partition refuses an older one, and a newer one would
		// fence the coordinator's own later markers for this producer.
		pd, ok := md.Topics["__transaction_state"].Partitions[h.decision.partition]
		if !ok || pd.LeaderEpoch < 0 {
			return done, fmt.Errorf("no leader epoch for __transaction_state/%d (the coordinator of %s)", h.decision.partition, h)
		}
		if why, err := stillHanging(ctx, adm, h); err != nil {
			return done, err
		} else if why != "" {
			done = append(done, fmt.Sprintf("skipped, no marker written (%s): %s", why, h))
			continue
		}
		before := lastStable(ctx, adm, h.topic, h.partition)
		req := kmsg.NewPtrWriteTxnMarkersRequest()
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch = h.pid, h.decision.v.ProducerEpoch
		m.Committed = h.committed()
		m.CoordinatorEpoch = pd.LeaderEpoch
		m.TransactionVersion = int8(h.decision.v.ClientTransactionVersion)
		mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		mt.Topic, mt.Partitions = h.topic, []int32{h.partition}
		m.Topics = append(m.Topics, mt)
		req.Markers = append(req.Markers, m)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return done, fmt.Errorf("writing the marker of %s: %w", h, err)
		}
		for _, rm := range resp.Markers {
			for _, rt := range rm.Topics {
				for _, rp := range rt.Partitions {
					if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
						return done, fmt.Errorf("writing the marker of %s: %w", h, err)
					}
				}
			}
		}
		res := "ABORT"
		if m.Committed {
			res = "COMMIT"
		}
		done = append(done, fmt.Sprintf("wrote a %s marker (producer epoch %d, coordinator epoch %d, transaction version %d); last stable offset %d -> %d; %s",
			res, m.ProducerEpoch, m.CoordinatorEpoch, m.TransactionVersion, before, lastStable(ctx, adm, h.topic, h.partition), h))
	}
	return done, nil
}

// stillHanging checks, just before a marker is written, that h is still
// the partition's open transaction and that its coordinator has nothing in
// flight for the transactional id; it returns why not ("" if so).
func stillHanging(ctx context.Context, adm *kadm.Client, h hanging) (string, error) {
	s := kadm.TopicsSet{}
	s.Add(h.topic, h.partition)
	prods, err := adm.DescribeProducers(ctx, s)
	if err != nil {
		return "", fmt.Errorf("describing the producers of %s/%d: %w", h.topic, h.partition, err)
	}
	p, ok := prods[h.topic].Partitions[h.partition].ActiveProducers[h.pid]
	if !ok || p.CurrentTxnStartOffset != h.startOff || p.ProducerEpoch != h.epoch {
		return "the partition's open transaction changed", nil
	}
	txns, err := adm.DescribeTransactions(ctx, h.decision.id)
	if err != nil {
		return "", fmt.Errorf("describing transactional id %s: %w", h.decision.id, err)
	}
	d, err := txns.On(h.decision.id, nil)
	if err == nil {
		err = d.Err
	}
	if err != nil {
		return "", fmt.Errorf("describing transactional id %s: %w", h.decision.id, err)
	}
	switch {
	case d.ProducerID != h.pid:
		return fmt.Sprintf("the transactional id moved on to producer id %d", d.ProducerID), nil
	case d.State != "CompleteCommit" && d.State != "CompleteAbort" && d.State != "Empty":
		return fmt.Sprintf("its coordinator has a transaction in state %s", d.State), nil
	}
	return "", nil
}

// lastStable returns the last stable offset of a partition (-1 if unknown).
func lastStable(ctx context.Context, adm *kadm.Client, topic string, partition int32) int64 {
	lso, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return -1
	}
	o, ok := lso.Lookup(topic, partition)
	if !ok || o.Err != nil {
		return -1
	}
	return o.Offset
}

// findHanging lists the candidate hanging transactions on topics: open on a
// partition, and finished by their coordinator according to
// __transaction_state (see healHangingTxns).
func findHanging(ctx context.Context, cl *kgo.Client, topics []string) ([]hanging, error) {
	adm := kadm.NewClient(cl)
	s := kadm.TopicsSet{}
	s.MergeTopics(topics)
	prods, err := adm.DescribeProducers(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("describing producers: %w", err)
	}
	var open []kadm.DescribedProducer
	for _, p := range prods.SortedProducers() {
		if p.CurrentTxnStartOffset >= 0 {
			open = append(open, p)
		}
	}
	if len(open) == 0 {
		return nil, nil
	}
	// Read after DescribeProducers: the Ongoing record of every open
	// transaction seen there is written before its records.
	recs, err := readCoordinatorLog(ctx, cl)
	if err != nil {
		return nil, err
	}
	var out []hanging
	for _, p := range open {
		// The transactional id of the producer, and its newest record.
		id, last := "", -1
		for i, r := range recs {
			if r.v.ProducerID == p.ProducerID && r.v.ProducerEpoch >= p.ProducerEpoch {
				id = r.id
			}
			if id != "" && r.id == id {
				last = i
			}
		}
		if last < 0 {
			continue
		}
		switch recs[last].v.State {
		case kmsg.TransactionStateCompleteCommit, kmsg.TransactionStateCompleteAbort, kmsg.TransactionStateEmpty:
			// Nothing in flight (Empty: a new producer of the id, such as a
			// restarted bridge, has initialised since).
		case kmsg.TransactionStateOngoing, kmsg.TransactionStatePrepareCommit, kmsg.TransactionStatePrepareAbort:
			continue // the coordinator still runs it
		case kmsg.TransactionStateDead, kmsg.TransactionStatePrepareEpochFence:
			continue // Dead, fenced: not ours to judge
		default:
			continue // a state newer than this test: not ours to judge
		}
		// The open transaction: the last Ongoing record of the producer id
		// and epoch that lists the partition. The coordinator's decision:
		// the first Prepare record after it that lists the partition,
		// followed by the matching Complete record.
		ongoing := -1
		for i, r := range recs[:last] {
			if r.id == id && r.v.ProducerID == p.ProducerID && r.v.ProducerEpoch == p.ProducerEpoch && r.v.State == kmsg.TransactionStateOngoing &&
				r.has(p.Topic, p.Partition) {
				ongoing = i
			}
		}
		if ongoing < 0 {
			continue
		}
		var h *hanging
		for _, r := range recs[ongoing+1 : last+1] {
			if r.id != id {
				continue
			}
			if h == nil {
				if (r.v.State == kmsg.TransactionStatePrepareCommit || r.v.State == kmsg.TransactionStatePrepareAbort) && r.has(p.Topic, p.Partition) {
					h = &hanging{topic: p.Topic, partition: p.Partition, pid: p.ProducerID, epoch: p.ProducerEpoch,
						startOff: p.CurrentTxnStartOffset, decision: r}
				}
				continue
			}
			if r.v.State == h.decision.v.State+2 { // PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort
				h.complete = r
				out = append(out, *h)
			}
			break
		}
	}
	return out, nil
}

// readCoordinatorLog reads every record of __transaction_state.
func readCoordinatorLog(ctx context.Context, cl *kgo.Client) ([]coordRecord, error) {
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, "__transaction_state")
	if err != nil {
		return nil, fmt.Errorf("listing __transaction_state: %w", err)
	}
	offsets := map[string]map[int32]kgo.Offset{"__transaction_state": {}}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			offsets[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
			left[o.Partition] = o.Offset
		}
	})
	if len(left) == 0 {
		return nil, nil
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...), kgo.ConsumePartitions(offsets))
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var out []coordRecord
	for len(left) > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading __transaction_state: %w", err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return nil, fmt.Errorf("reading __transaction_state: %w", ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
			var k kmsg.TxnMetadataKey
			if r.Value == nil || k.ReadFrom(r.Key) != nil {
				return
			}
			v := kmsg.NewTxnMetadataValue()
			if v.ReadFrom(r.Value) != nil {
				return
			}
			out = append(out, coordRecord{partition: r.Partition, offset: r.Offset, id: k.TransactionalID, v: v})
		})
	}
	return out, nil
}

// healHanging runs healHangingTxns passes times, 500 ms apart (a restarted
// coordinator may complete a transaction without its markers a moment
// after the broker answers again), and returns a note per healed
// transaction. Errors fail the test.
func healHanging(t *testing.T, passes int, brokers []string, topics ...string) []string {
	t.Helper()
	var notes []string
	for pass := range passes {
		if pass > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		healed, err := healHangingTxns(brokers, topics...)
		if err != nil {
			t.Errorf("healing the transactions the broker left hanging: %v", err)
			return notes
		}
		for _, h := range healed {
			if strings.HasPrefix(h, "skipped") {
				// Usually the coordinator's own markers arrived between the
				// two looks: a transaction completing normally.
				notes = append(notes, "healer "+h)
				continue
			}
			notes = append(notes, "HEALED a transaction the broker left hanging (Kafka bug, see healHangingTxns): "+h)
		}
	}
	return notes
}
