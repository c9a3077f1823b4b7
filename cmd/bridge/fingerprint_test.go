package main

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/ops"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// TestRunRetractsRecordsOfEarlierBridges: without a registry, bridges
// before this one framed values with another fingerprint of the same
// schema (goavro's canonical form, encode.EarlierSingleObjectFramings).
// After an upgrade a reorg retracts such records, read back from Kafka,
// and verify reads them. The first run's produce requests are rewritten
// in the broker so that its records carry the earlier fingerprint, as an
// earlier bridge wrote them.
func TestRunRetractsRecordsOfEarlierBridges(t *testing.T) {
	t.Parallel()
	svc, kc := fakeServicesCluster(t)
	svc.registry = ""
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 8}, MaxMicrobatchBlocks: 1}, 128)
	h.cfg.Kafka.Compression = sink.CompressionNone // the rewrite below edits the record bytes in place

	b, err := newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	require.NoError(t, b.connect(t.Context(), needAmp))
	res, err := ops.Schema(t.Context(), b.amp, h.cfg.Streams[0], "", buildVersion())
	b.close()
	require.NoError(t, err)
	now, err := encode.SingleObjectFraming(res.Value)
	require.NoError(t, err)
	earlier := encode.EarlierSingleObjectFramings(res.Value)
	require.Len(t, earlier, 1, "the envelope's nested namespaced records give goavro's canonical form another fingerprint")
	from, to := now.AppendHeader(nil), earlier[0].AppendHeader(nil)

	var rewrite atomic.Bool
	var rewritten atomic.Int64
	rewrite.Store(true)
	kc.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if !rewrite.Load() {
			return nil, nil, false
		}
		req := kreq.(*kmsg.ProduceRequest)
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				p := &req.Topics[i].Partitions[j]
				if n := reframe(p.Records, from, to); n > 0 {
					rewritten.Add(int64(n))
				}
			}
		}
		return nil, nil, false // the broker handles the rewritten request
	})

	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())
	rewrite.Store(false)
	require.Positive(t, rewritten.Load(), "the first run's records were given the earlier fingerprint")
	topic := h.cfg.Streams[0].Topic
	require.Positive(t, framedWith(h, topic, to), "the first run's records carry the earlier fingerprint")
	require.Zero(t, framedWith(h, topic, from))

	// The reorg replaces blocks the first run wrote.
	require.NoError(t, h.sim.Reorg(4, 5))
	stop = h.run()
	h.waitHead()
	require.NoError(t, stop())
	rep := h.verify()
	requireClean(t, rep)
	assert.Positive(t, rep.Retracted, "the records of the earlier fingerprint were retracted")
	assert.Positive(t, framedWith(h, topic, from), "the second run writes the specification's fingerprint")
}

// reframe replaces the single-object header from with to (of the same
// length) in every value of the uncompressed v2 record batches of recs and
// recomputes each batch's CRC; it returns how many it replaced.
func reframe(recs, from, to []byte) int {
	n := 0
	for len(recs) >= 61 {
		size := 12 + int(int32(binary.BigEndian.Uint32(recs[8:])))
		if size > len(recs) || recs[16] != 2 || binary.BigEndian.Uint16(recs[21:])&0x7 != 0 {
			return n
		}
		batch := recs[:size]
		for body := batch[61:]; ; {
			i := bytes.Index(body, from)
			if i < 0 {
				break
			}
			copy(body[i:], to)
			body = body[i+len(to):]
			n++
		}
		binary.BigEndian.PutUint32(batch[17:], crc32.Checksum(batch[21:], crc32.MakeTable(crc32.Castagnoli)))
		recs = recs[size:]
	}
	return n
}

// framedWith counts the values of topic that start with header.
func framedWith(h *harness, topic string, header []byte) int {
	n := 0
	for _, r := range h.readTopic(topic) {
		if bytes.HasPrefix(r.value, header) {
			n++
		}
	}
	return n
}
