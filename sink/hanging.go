package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// HangingCheck finds, when a stream starts, the transactions of the
// stream's own producers that are still open on a partition although their
// coordinator has completed them (the Kafka broker bug in the README's
// known issue). Such a transaction never ends by itself, and the next
// marker its producer writes to the partition decides the fate of its
// records: a later commit would publish records the coordinator aborted, a
// later abort would discard records it committed. So the stream refuses to
// produce until an operator has ended it.
//
// Use it in two steps: PrepareHangingCheck before the producers initialise
// (it records the coordinator's state of their transactional ids: what it
// decided for their last transaction, which an initialisation replaces by
// Empty), then Check once they have, for every topic they write.
type HangingCheck struct {
	adm       *kadm.Client
	log       *slog.Logger
	cfg       Config
	bootstrap string
	ids       []string
	// before is the coordinator's state of each id before the
	// initialisation (absent: the id was unknown or could not be
	// described).
	before map[string]kadm.DescribedTransaction
}

// PrepareHangingCheck records the coordinator's state of txnIDs, the
// transactional ids of a stream's producers, before they initialise. An
// id the coordinator does not know yet (a new stream) has no state. A
// broker or credentials that cannot describe transactions make the check
// a no-op: Check then finds nothing.
func (a *Admin) PrepareHangingCheck(ctx context.Context, txnIDs ...string) (*HangingCheck, error) {
	h := &HangingCheck{adm: a.adm, log: a.log, cfg: a.cfg, bootstrap: strings.Join(a.brokers, ","), ids: txnIDs,
		before: make(map[string]kadm.DescribedTransaction, len(txnIDs))}
	if len(txnIDs) == 0 {
		return h, nil
	}
	txns, err := a.adm.DescribeTransactions(ctx, txnIDs...)
	if err != nil {
		if unsupported(err) {
			a.log.Warn("cannot describe transactions: the check for transactions left open by the broker is skipped", "err", err)
			h.ids = nil
			return h, nil
		}
		return nil, fmt.Errorf("describing transactional ids %v before initialising them: %w", txnIDs, err)
	}
	for _, d := range txns {
		if d.Err == nil {
			h.before[d.TxnID] = d
		}
	}
	return h, nil
}

// unsupported reports whether err means the cluster cannot answer a
// describe request from these credentials at all (an old broker, missing
// DESCRIBE permissions), as opposed to a transient failure.
func unsupported(err error) bool {
	return errors.Is(err, kerr.UnsupportedVersion) || errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// Check looks at every partition of topics for an open transaction of the
// stream's producer ids (those of its transactional ids before and after
// the initialisation) that their coordinator does not run any more. It
// returns nil when there is none, a *HangingTransactionError (several
// joined with errors.Join, one per partition) wrapping ErrOrphanedTransaction
// for each it finds, and a plain error when the look-up fails. A nil
// HangingCheck checks nothing.
//
// Check judges a transaction the way Kafka's find-hanging does, minus its
// 15-minute wait: after its producer initialised, its coordinator has
// nothing in flight for an earlier transaction (an initialisation completes
// or aborts it first), so an open transaction its coordinator does not list
// on the partition has lost its marker. A transaction still open is looked
// up twice, so that a marker landing between the two looks clears it.
func (h *HangingCheck) Check(ctx context.Context, topics ...string) error {
	if h == nil || len(h.ids) == 0 || len(topics) == 0 {
		return nil
	}
	txns, err := h.adm.DescribeTransactions(ctx, h.ids...)
	if err != nil {
		return fmt.Errorf("describing transactional ids %v: %w", h.ids, err)
	}
	now := make(map[string]kadm.DescribedTransaction, len(txns))
	owner := map[int64]string{} // producer id -> transactional id
	for _, id := range h.ids {
		if d, ok := h.before[id]; ok {
			owner[d.ProducerID] = id
		}
		if d, ok := txns[id]; ok && d.Err == nil {
			now[id] = d
			owner[d.ProducerID] = id
		}
	}
	s := kadm.TopicsSet{}
	for _, t := range topics {
		s.Add(t)
	}
	prods, err := h.adm.DescribeProducers(ctx, s)
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		// Read on the topics is one of the bridge's ACLs (RequiredACLs): a
		// principal without it cannot rebuild its checkpoint from the
		// control topic either, so it fails here, at the start, and not
		// when a recovery needs it.
		return h.cfg.authError(fmt.Errorf("describing the producers of %v: %w", topics, err),
			fmt.Sprintf("describing the producers of topics %v (the check for transactions left open)", topics), OpRead, "", topics...)
	}
	if err != nil && unsupported(err) {
		h.log.Warn("cannot describe the producers of the stream's topics: the check for transactions left open by the broker is skipped",
			"topics", topics, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("describing the producers of %v: %w", topics, err)
	}
	for _, dp := range prods.SortedPartitions() {
		if dp.Err != nil {
			// DescribeProducers needs Read on the topic.
			return h.cfg.authError(fmt.Errorf("describing the producers of %s/%d: %w", dp.Topic, dp.Partition, dp.Err),
				fmt.Sprintf("describing the producers of topic %q (the check for transactions left open)", dp.Topic), OpRead, "", dp.Topic)
		}
	}
	var found []error
	for _, p := range prods.SortedProducers() {
		id, ours := owner[p.ProducerID]
		if !ours || p.CurrentTxnStartOffset < 0 {
			continue
		}
		d := now[id]
		if d.ProducerID == p.ProducerID && d.Topics.Lookup(p.Topic, p.Partition) &&
			d.State != "CompleteCommit" && d.State != "CompleteAbort" && d.State != "Empty" {
			continue // its coordinator runs it (the producer's current transaction)
		}
		still, err := stillOpen(ctx, h.adm, p)
		if err != nil {
			return err
		}
		if !still {
			continue
		}
		found = append(found, h.orphaned(p, id, d))
	}
	return errors.Join(found...)
}

// orphaned builds the error of producer p's open transaction on its
// partition, of transactional id id (d: its coordinator's state now).
func (h *HangingCheck) orphaned(p kadm.DescribedProducer, id string, d kadm.DescribedTransaction) *HangingTransactionError {
	e := &HangingTransactionError{Topic: p.Topic, Partition: p.Partition, Target: -1, LastStable: -1, Bootstrap: h.bootstrap,
		AtStart: true, Found: true, ProducerID: p.ProducerID, ProducerEpoch: p.ProducerEpoch, StartOffset: p.CurrentTxnStartOffset,
		CoordinatorEpoch: p.CoordinatorEpoch, TransactionalID: id, CoordinatorState: d.State, Verdict: HangingOrphaned}
	if p.LastTimestamp >= 0 {
		e.LastWrite = time.UnixMilli(p.LastTimestamp)
	}
	// The decision: what the coordinator recorded for the id's last
	// transaction before this start's initialisation replaced it.
	if b, ok := h.before[id]; ok && b.ProducerID == p.ProducerID {
		switch b.State {
		case "PrepareCommit", "CompleteCommit":
			e.CoordinatorState = "CompleteCommit"
		case "Ongoing", "PrepareAbort", "CompleteAbort":
			// An initialisation aborts an ongoing transaction.
			e.CoordinatorState = "CompleteAbort"
		}
		e.TxnStarted = time.UnixMilli(b.StartTimestamp)
		e.TxnTimeout = time.Duration(b.TimeoutMillis) * time.Millisecond
	}
	return e
}

// stillOpen reports whether producer p's transaction is still open on its
// partition, from the same start offset.
func stillOpen(ctx context.Context, adm *kadm.Client, p kadm.DescribedProducer) (bool, error) {
	s := kadm.TopicsSet{}
	s.Add(p.Topic, p.Partition)
	prods, err := adm.DescribeProducers(ctx, s)
	if err != nil {
		return false, fmt.Errorf("describing the producers of %s/%d again: %w", p.Topic, p.Partition, err)
	}
	q, ok := prods[p.Topic].Partitions[p.Partition].ActiveProducers[p.ProducerID]
	return ok && q.ProducerEpoch == p.ProducerEpoch && q.CurrentTxnStartOffset == p.CurrentTxnStartOffset, nil
}
