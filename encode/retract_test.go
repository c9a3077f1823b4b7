package encode

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

func TestRetract(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	tests := []struct {
		name    string
		cfg     Config
		framing func(enc *Encoder) (Framing, Framing)
	}{
		{"debezium single-object", Config{Stream: "s", Version: "v9"}, nil},
		{"debezium confluent", Config{Stream: "s"}, func(*Encoder) (Framing, Framing) { return ConfluentFraming(17), Framing{} }},
		{"flat confluent", Config{Stream: "s", Envelope: EnvelopeFlat}, func(*Encoder) (Framing, Framing) { return ConfluentFraming(3), Framing{} }},
		{"flat single-object", Config{Stream: "s", Envelope: EnvelopeFlat}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := allTypesSchema()
			enc := newTestEncoder(t, tc.cfg, s)
			if tc.framing != nil {
				v, k := tc.framing(enc)
				enc.SetFraming(v, k)
			}
			rec := newGen(21, mem).batch(s, 60)
			defer rec.Release()
			var out Batch
			meta := BatchMeta{Op: OpRead, Snapshot: true, Ranges: []reorg.BlockRange{testRange(3, 4)}, TsMs: 100}
			require.NoError(t, enc.Encode(rec, meta, &out))
			orig := decodeAll(t, enc, &out)

			rt := NewRetractor()
			_, err := rt.Retract(nil, out.Value(0), 1, "reorg")
			require.ErrorIs(t, err, ErrUnknownSchema)
			require.NoError(t, rt.Add(enc.ValueFraming(), enc.Schemas().Value))
			assert.True(t, rt.Knows(enc.ValueFraming()))

			codec, err := goavro.NewCodec(enc.Schemas().Value)
			require.NoError(t, err)
			vt, err := parseSchema(enc.Schemas().Value)
			require.NoError(t, err)
			var dst []byte
			for i := range out.Len() {
				start := len(dst)
				dst, err = rt.Retract(dst, out.Value(i), 999, "reorg")
				require.NoError(t, err)
				got := dst[start:]
				f, body, err := ParseHeader(got)
				require.NoError(t, err)
				assert.Equal(t, enc.ValueFraming(), f)
				native, rest, err := codec.NativeFromBinary(body)
				require.NoError(t, err)
				require.Empty(t, rest)
				r := normalize(vt, native).(map[string]any)
				o := orig[i]
				if tc.cfg.Envelope == EnvelopeFlat {
					assert.Equal(t, "d", r["_amp_op"])
					assert.Equal(t, int64(999), r["_amp_ts_ms"])
					assert.Equal(t, "reorg", r["_amp_cause"])
					for k, v := range o {
						if k != "_amp_op" && k != "_amp_ts_ms" && k != "_amp_cause" {
							assert.Equal(t, v, r[k], k)
						}
					}
				} else {
					assert.Equal(t, "d", r["op"])
					assert.Equal(t, int64(999), r["ts_ms"])
					assert.Nil(t, r["after"])
					assert.Equal(t, o["after"], r["before"])
					src, osrc := r["source"].(map[string]any), o["source"].(map[string]any)
					assert.Equal(t, "reorg", src["cause"])
					for k, v := range osrc {
						if k != "cause" {
							assert.Equal(t, v, src[k], k)
						}
					}
				}
				// A retraction is not an insert: retracting it again fails.
				_, err = rt.Retract(nil, got, 1, "reorg")
				require.ErrorIs(t, err, ErrNotInsert)
			}
		})
	}
}

func TestRetractErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s := logsSchema()
	enc := newTestEncoder(t, Config{Stream: "s"}, s)
	rec := newGen(1, mem).batch(s, 1)
	defer rec.Release()
	var out Batch
	require.NoError(t, enc.Encode(rec, BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(3, 4)}}, &out))
	rt := NewRetractor()
	require.NoError(t, rt.Add(enc.ValueFraming(), enc.Schemas().Value))
	v := out.Value(0)
	tests := []struct {
		name        string
		in          []byte
		errContains string
	}{
		{"empty", nil, "unknown Avro framing"},
		{"bad magic", []byte{1, 2, 3, 4, 5, 6}, "unknown Avro framing"},
		{"truncated", v[:len(v)-3], "malformed"},
		{"trailing", append(append([]byte{}, v...), 0), "trailing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("keep")
			got, err := rt.Retract(dst, tc.in, 1, "reorg")
			require.Error(t, err)
			assert.ErrorContains(t, err, tc.errContains)
			assert.Equal(t, "keep", string(got))
		})
	}
	require.Error(t, rt.Add(ConfluentFraming(1), `{"type":"record","name":"X","fields":[{"name":"a","type":"int"}]}`))
}
