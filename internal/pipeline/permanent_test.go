package pipeline

import (
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// TestPermanentRedisAccess: Redis refusing the password, a permission or
// the TLS handshake stops the stream (a retry cannot fix it); Redis
// refusing the connection, e.g. while it restarts, does not.
func TestPermanentRedisAccess(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	m := miniredis.RunT(t)
	m.RequireUserAuth("bridge", "s3cret")
	_, err := offsets.NewRedisStore(t.Context(), offsets.RedisConfig{Addr: m.Addr(), Username: "bridge", Password: "wrong"}, log)
	require.ErrorIs(t, err, offsets.ErrRedisAuth)
	assert.True(t, Permanent(err), "wrong password: %v", err)
	assert.True(t, Permanent(NoAnswer("checkpoint store redis at "+m.Addr(), err)))

	for _, kind := range []error{offsets.ErrRedisPermission, offsets.ErrRedisTLS} {
		err := fmt.Errorf("committing: %w", &offsets.RedisAccessError{Kind: kind, Addr: "r:6379", User: "bridge", Err: assert.AnError})
		assert.True(t, Permanent(err), "%v", err)
	}

	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	_, err = offsets.NewRedisStore(t.Context(), offsets.RedisConfig{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1}, log)
	require.ErrorContains(t, err, "connection refused")
	assert.False(t, Permanent(err), "a refused connection is transient: %v", err)
}

// TestPermanentKafkaAccess: a broker refusing the SASL password or
// mechanism, presenting a certificate of an untrusted CA, refusing the
// client certificate, a missing ACL, or a kafka.transaction_timeout above
// the broker's transaction.max.timeout.ms stops the stream (the real broker's
// errors: sink's TestIntegrationSecurity, cmd/bridge's
// TestIntegrationSecureKafka).
func TestPermanentKafkaAccess(t *testing.T) {
	acl := &sink.AuthorizationError{Doing: "producing", Principal: "User:bridge",
		Missing: sink.ACL{Resource: sink.ResourceTopic, Name: "t", Operation: sink.OpWrite}, Err: assert.AnError}
	assert.True(t, Permanent(fmt.Errorf("stream s: committing: %w", fmt.Errorf("%w: aborted: %w", sink.ErrAborted, acl))), "a missing ACL")
	for _, kind := range []error{sink.ErrAuthentication, sink.ErrUntrustedCertificate, sink.ErrSASLMechanism, sink.ErrClientCertificate,
		sink.ErrTransactionTimeout} {
		err := fmt.Errorf("stream s: creating the producer: %w", fmt.Errorf("connecting to kafka [b:9093]: %w: fix", kind))
		assert.True(t, Permanent(err), "%v", err)
	}
}

// TestPermanentControlTopic: control events that do not rebuild the
// stream's state, or a control topic that no longer holds them, stop the
// stream: a restart reads the same committed events (offsets'
// TestNewestStateLostEvent and TestNewestStateTruncated make them).
func TestPermanentControlTopic(t *testing.T) {
	for _, kind := range []error{offsets.ErrRollForward, offsets.ErrControlTruncated} {
		err := fmt.Errorf("reconciling the checkpoint of stream s with Kafka: %w", fmt.Errorf("control topic c: %w", kind))
		assert.True(t, Permanent(err), "%v", err)
	}
}
