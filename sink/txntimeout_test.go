package sink

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestTransactionTimeoutCheckedAtStart: a kafka.transaction_timeout above
// the broker's transaction.max.timeout.ms is refused before any
// transaction, by the admin's check and by the producer id request, with
// an error naming both keys; at or below it, both pass.
func TestTransactionTimeoutCheckedAtStart(t *testing.T) {
	_, cfg := newCluster(t, kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "5000"}))
	a := newAdmin(t, cfg)
	ctx := testCtx(t)
	require.NoError(t, a.CheckTransactionTimeout(ctx, 5*time.Second))

	err := a.CheckTransactionTimeout(ctx, 6*time.Second)
	require.ErrorIs(t, err, ErrTransactionTimeout)
	for _, want := range []string{"kafka.transaction_timeout is 6s", "transaction.max.timeout.ms is 5s", "lower kafka.transaction_timeout"} {
		assert.ErrorContains(t, err, want)
	}

	cfg.TransactionTimeout = 6 * time.Second
	cfg.ReadTimeout = 10 * time.Second
	_, err = NewProducer(ctx, cfg, "tto", Deps{Logger: testLogger(t)})
	require.ErrorIs(t, err, ErrTransactionTimeout, "the producer id request is refused too")
	assert.ErrorContains(t, err, "transaction.max.timeout.ms")
}
