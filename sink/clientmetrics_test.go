package sink

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClientMetricsOptIn checks that the clients push no KIP-714 metrics
// unless kafka.client_metrics is set: by default a producer never asks the
// broker for a telemetry subscription (kfake asks for every metric), and
// with ClientMetrics it does.
func TestClientMetricsOptIn(t *testing.T) {
	c, cfg := newCluster(t)
	var asked atomic.Int64
	c.ControlKey(int16(kmsg.GetTelemetrySubscriptions), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		asked.Add(1)
		return nil, nil, false
	})

	createTopic(t, cfg, "data", 1)
	produce := func(p *Producer) {
		ctx := testCtx(t)
		require.NoError(t, p.Begin())
		require.NoError(t, p.Produce(ctx, dataRecord("data", "b", 0)))
		_, err := p.Commit(ctx)
		require.NoError(t, err)
	}
	produce(newProducer(t, cfg, "quiet", Deps{}))
	time.Sleep(time.Second) // franz-go asks after its first request once it pushes metrics
	assert.Zero(t, asked.Load(), "a client without client_metrics asked for a telemetry subscription")

	on := cfg
	on.ClientMetrics = true
	produce(newProducer(t, on, "telemetry", Deps{}))
	assert.Eventually(t, func() bool { return asked.Load() > 0 }, 10*time.Second, 20*time.Millisecond,
		"a client with client_metrics never asked for a telemetry subscription")
}
