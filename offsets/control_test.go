package offsets

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

func TestControlRoundTrip(t *testing.T) {
	c, err := NewControlCodec()
	require.NoError(t, err)
	r1, r2 := testRange(10, 12), testRange(13, 13)
	r2.HasPrevHash, r2.PrevHash = false, reorg.Hash{}
	w := Watermark{
		Stream: "eth", Sequence: 7, TsMs: 1700000000000, Rows: 12, Checkpoint: []byte(`{"format":1}`),
		Cursor: reorg.Cursor{"mainnet": {Number: 13, Hash: r2.Hash}, "base": {Number: 5, Hash: r1.Hash}},
		Batches: []CommittedBatch{
			{BatchID: reorg.BatchID([]reorg.BlockRange{r1}), Sequence: 5, Ranges: []reorg.BlockRange{r1}, Rows: 10,
				Spans: []Span{{Topic: "t", Partition: 2, First: 100, Last: 109}}},
			{BatchID: "x", Sequence: 6, Ranges: []reorg.BlockRange{r2}, Rows: 2,
				Spans: []Span{{Topic: "t", Partition: 0, First: 0, Last: 0}, {Topic: "t", Partition: 1, First: 5, Last: 5}}},
		},
	}
	u := Undo{Stream: "eth", Sequence: 8, TsMs: 1, Cause: "reorg", BatchIDs: []string{"a", "b"},
		Ranges: []InvalidatedRange{{Network: "mainnet", Start: 12, End: 13}}, FirstSequence: 5, LastSequence: 6}

	w.State = &StreamState{Next: 9, Retained: []uint64{5, 6}, Incomplete: true, BaseOffset: 42}
	b, err := c.AppendWatermark([]byte("prefix"), w)
	require.NoError(t, err)
	require.Equal(t, "prefix", string(b[:6]))
	assert.Equal(t, []byte{0xC3, 0x01}, b[6:8])
	ev, err := c.Decode(b[6:])
	require.NoError(t, err)
	require.Equal(t, ControlWatermark, ev.Kind)
	assert.Equal(t, &w, ev.Watermark)

	// A backfill watermark: its partition, no cursor, no checkpoint.
	bw := Watermark{Stream: "eth", TsMs: 5, Rows: 10, Cursor: reorg.Cursor{}, Backfill: &BackfillPartition{From: 10, To: 20},
		Batches: []CommittedBatch{{BatchID: "b", Ranges: []reorg.BlockRange{r1}, Rows: 10}}}
	b, err = c.AppendWatermark(nil, bw)
	require.NoError(t, err)
	ev, err = c.Decode(b)
	require.NoError(t, err)
	assert.Equal(t, &bw, ev.Watermark)

	b, err = c.AppendUndo(nil, u)
	require.NoError(t, err)
	ev, err = c.Decode(b)
	require.NoError(t, err)
	require.Equal(t, ControlUndo, ev.Kind)
	assert.Equal(t, &u, ev.Undo)

	// Avro single-object encoding: C3 01, then the schema's CRC-64-AVRO
	// fingerprint little-endian, computed here by hamba/avro, an
	// implementation independent of goavro's, which writes it.
	for kind, ev := range map[ControlKind][]byte{ControlUndo: b, ControlWatermark: mustWatermark(t, c, w)} {
		sch, err := avro.Parse(c.Schema(kind))
		require.NoError(t, err)
		fp, err := sch.FingerprintUsing(avro.CRC64Avro)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(ev), 10)
		assert.Equal(t, []byte{0xC3, 0x01}, ev[:2], kind.String())
		assert.Equal(t, fp, binary.LittleEndian.AppendUint64(nil, binary.BigEndian.Uint64(ev[2:10])), "%s fingerprint", kind)
	}
}

func mustWatermark(t *testing.T, c *ControlCodec, w Watermark) []byte {
	t.Helper()
	b, err := c.AppendWatermark(nil, w)
	require.NoError(t, err)
	return b
}

func TestControlErrors(t *testing.T) {
	c, err := NewControlCodec()
	require.NoError(t, err)
	tests := []struct {
		name        string
		run         func() error
		errContains string
	}{
		{"bad cause", func() error { _, err := c.AppendUndo(nil, Undo{Cause: "oops"}); return err }, "want reorg or rewind"},
		{"sequence too big", func() error { _, err := c.AppendWatermark(nil, Watermark{Sequence: math.MaxUint64}); return err }, "does not fit"},
		{"unknown fingerprint", func() error {
			_, err := c.Decode([]byte{0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8})
			return err
		}, "neither the watermark's nor the undo's"},
		{"not framed", func() error { _, err := c.Decode([]byte{9}); return err }, "malformed control event"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorContains(t, tc.run(), tc.errContains)
		})
	}
}

func testRange(start, end uint64) reorg.BlockRange {
	var h, p reorg.Hash
	h[0], h[31] = byte(end), 0xaa
	p[0], p[31] = byte(start-1), 0xbb
	return reorg.BlockRange{Network: "mainnet", Start: start, End: end, Hash: h, PrevHash: p, HasPrevHash: true}
}
