package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// TestIntegrationRegistryRefusesIncompatible runs a stream against the real
// Kafka broker, redis-server and registry of deploy/local (Apicurio
// Registry, compatibility BACKWARD), then starts it again with
// streams[].fixed_as changed from fixed to hex, which changes the value
// schema incompatibly: the registry itself refuses the new version (409),
// the stream stops on a permanent error that names the subject, quotes the
// registry, names the field the bridge's own check finds and says how to
// go on, and nothing is committed: the data and control topics end where
// they ended.
func TestIntegrationRegistryRefusesIncompatible(t *testing.T) {
	svc := realServices(t)
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 4, TxPerBlock: 2}}, 128)
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())

	cl, err := kgo.NewClient(kgo.SeedBrokers(svc.brokers...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := []string{h.cfg.Streams[0].Topic, h.cfg.Kafka.ControlTopic}
	before, err := adm.ListEndOffsets(t.Context(), topics...)
	require.NoError(t, err)
	require.NoError(t, before.Error())

	h.cfg.Streams[0].FixedAs = config.FixedAsHex
	err = h.runOnce(t)
	require.Error(t, err, "the stream must stop")
	assert.ErrorIs(t, err, encode.ErrIncompatible)
	assert.True(t, pipeline.Permanent(err), "a refused schema does not fix itself: %v", err)
	msg := err.Error()
	t.Logf("the refusal: %s", msg)
	subject := encode.ValueSubject(h.cfg.Streams[0].Topic)
	for _, want := range []string{
		`subject "` + subject + `"`,
		"the registry refused the new schema",
		"RuleViolationException", // Apicurio's own words
		"the bridge's BACKWARD check: field",
		"nothing was registered or published; to go on",
	} {
		assert.Contains(t, msg, want)
	}

	after, err := adm.ListEndOffsets(t.Context(), topics...)
	require.NoError(t, err)
	before.Each(func(o kadm.ListedOffset) {
		a, ok := after.Lookup(o.Topic, o.Partition)
		require.True(t, ok)
		assert.Equal(t, o.Offset, a.Offset, "%s/%d: nothing committed after the refusal", o.Topic, o.Partition)
	})
}
