package sink

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// TestIntegrationHangingTransactionNamed: a producer that begins a
// transaction, writes and never ends it holds the partition's last stable
// offset back; a read that gives up names that transaction, says its
// coordinator still runs it (so it ends by its timeout) and gives the
// operator's command.
func TestIntegrationHangingTransactionNamed(t *testing.T) {
	addr := testenv.RequireReal(t, testenv.ServiceKafka, testenv.EnvKafkaSeeds)
	b := testenv.Backend{Name: "real-kafka", Addr: addr, Real: true}
	topic := testenv.NewTopic(t, b, "hanging", 2, nil)
	cfg := testConfig(addr)
	cfg.TransactionalIDPrefix = testenv.UniqueName(t, "sinktest")
	cfg.TransactionTimeout = time.Second
	cfg.ReadTimeout = 2 * time.Second
	ctx := testCtx(t)

	// One committed record, then a transaction left open on partition 1.
	txnID := testenv.UniqueName(t, "open-txn")
	pid, epoch := openTransaction(ctx, t, cfg.Brokers, topic, txnID)

	r := newReader(t, cfg)
	start := time.Now()
	_, err := r.ReadTopic(ctx, topic)
	require.Error(t, err)
	assert.Less(t, time.Since(start), cfg.ReadTimeout+hangingDescribeTimeout+time.Second, "bounded by the read timeout and the look-up")
	t.Logf("the error:\n%v", err)
	assert.ErrorIs(t, err, ErrHangingTransaction)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var he *HangingTransactionError
	require.ErrorAs(t, err, &he)
	require.True(t, he.Found, "the open transaction was found: %v", he.DescribeErr)
	assert.Equal(t, topic, he.Topic)
	assert.Equal(t, int32(1), he.Partition)
	assert.Equal(t, pid, he.ProducerID)
	assert.Equal(t, epoch, he.ProducerEpoch)
	assert.Equal(t, int64(2), he.StartOffset, "after the committed record and its marker")
	assert.Equal(t, int64(2), he.LastStable)
	assert.Equal(t, int64(4), he.Target)
	assert.Equal(t, txnID, he.TransactionalID)
	assert.Equal(t, "Ongoing", he.CoordinatorState)
	assert.Equal(t, HangingOngoing, he.Verdict)
	assert.Equal(t, time.Minute, he.TxnTimeout)
	assert.WithinDuration(t, time.Now(), he.LastWrite, time.Minute)
	require.NoError(t, he.DescribeErr)
	msg := err.Error()
	for _, want := range []string{
		fmt.Sprintf("%s/1", topic), fmt.Sprintf("producer id %d epoch %d", pid, epoch), fmt.Sprintf("%q", txnID),
		"starts at offset 2", "still considers it ongoing (state Ongoing", "transaction timeout 1m0s",
	} {
		assert.Contains(t, msg, want)
	}
	assert.NotContains(t, msg, "abort --topic", "no abort advice for a transaction that ends by itself")

	// The reconciliation read of partition 0 is not held back.
	cr, err := r.ReadControl(ctx, topic, -1)
	require.NoError(t, err)
	assert.Empty(t, cr.Records)
}

// TestHangingTransactionErrorText: the text of the three verdicts, and what
// callers branch on.
func TestHangingTransactionErrorText(t *testing.T) {
	base := HangingTransactionError{Topic: "s.control", Partition: 0, Target: 120, LastStable: 97, Bootstrap: "k1:9092,k2:9092",
		Found: true, ProducerID: 7, ProducerEpoch: 3, StartOffset: 97, LastWrite: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		CoordinatorEpoch: 2, TransactionalID: "amp.s", Err: context.DeadlineExceeded}
	abort := "`kafka-transactions.sh --bootstrap-server k1:9092,k2:9092 abort --topic s.control --partition 0 --start-offset 97`"

	committed := base
	committed.Verdict, committed.CoordinatorState = HangingOrphaned, "CompleteCommit"
	err := fmt.Errorf("reading control topic s.control: %w", &committed)
	t.Logf("completed by its coordinator:\n%v", err)
	assert.ErrorIs(t, err, ErrHangingTransaction)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	for _, want := range []string{
		"producer id 7 epoch 3 (transactional id \"amp.s\") that starts at offset 97", "It will never end by itself",
		"its coordinator has finished with it (state CompleteCommit)", abort, "COMMITTED it", "bridge verify", "bridge rewind",
	} {
		assert.Contains(t, err.Error(), want)
	}

	aborted := base
	aborted.Verdict, aborted.CoordinatorState = HangingOrphaned, "CompleteAbort"
	assert.Contains(t, aborted.Error(), "the abort loses nothing")
	assert.NotContains(t, aborted.Error(), "COMMITTED")

	unknown := base
	unknown.Found, unknown.DescribeErr = false, errors.New("describing the producers of s.control/0: NOT_LEADER_OR_FOLLOWER")
	t.Logf("not found:\n%v", &unknown)
	assert.Contains(t, unknown.Error(), "describe-producers --topic s.control --partition 0")
	assert.Contains(t, unknown.Error(), "NOT_LEADER_OR_FOLLOWER")
	assert.ErrorIs(t, &unknown, ErrHangingTransaction)
}
