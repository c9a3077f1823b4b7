package encode

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

func TestCheckBackward(t *testing.T) {
	rec := func(fields string) string {
		return `{"type":"record","name":"R","namespace":"n","fields":[` + fields + `]}`
	}
	tests := []struct {
		name        string
		reader      string
		writer      string
		field       string
		errContains string
	}{
		{name: "same", reader: rec(`{"name":"a","type":"int"}`), writer: rec(`{"name":"a","type":"int"}`)},
		{name: "add nullable with default", reader: rec(`{"name":"a","type":"int"},{"name":"b","type":["null","long"],"default":null}`), writer: rec(`{"name":"a","type":"int"}`)},
		{name: "drop field", reader: rec(`{"name":"a","type":"int"}`), writer: rec(`{"name":"a","type":"int"},{"name":"b","type":"long"}`)},
		{name: "promote int to long", reader: rec(`{"name":"a","type":"long"}`), writer: rec(`{"name":"a","type":"int"}`)},
		{name: "promote string to bytes", reader: rec(`{"name":"a","type":"bytes"}`), writer: rec(`{"name":"a","type":"string"}`)},
		{name: "make nullable", reader: rec(`{"name":"a","type":["null","int"],"default":null}`), writer: rec(`{"name":"a","type":"int"}`)},
		{name: "add field without default", reader: rec(`{"name":"a","type":"int"},{"name":"b","type":"long"}`), writer: rec(`{"name":"a","type":"int"}`),
			field: "b", errContains: "without a default"},
		{name: "narrow long to int", reader: rec(`{"name":"a","type":"int"}`), writer: rec(`{"name":"a","type":"long"}`),
			field: "a", errContains: "type changed from long to int"},
		{name: "make non-nullable", reader: rec(`{"name":"a","type":"int"}`), writer: rec(`{"name":"a","type":["null","int"],"default":null}`),
			field: "a", errContains: "type changed from null to int"},
		{name: "fixed size", reader: rec(`{"name":"a","type":{"type":"fixed","name":"F","size":20}}`), writer: rec(`{"name":"a","type":{"type":"fixed","name":"F","size":32}}`),
			field: "a", errContains: "fixed size changed from 32 to 20"},
		{name: "nested in union and array", reader: rec(`{"name":"a","type":["null",{"type":"array","items":{"type":"record","name":"I","fields":[{"name":"x","type":"int"},{"name":"y","type":"string"}]}}],"default":null}`),
			writer: rec(`{"name":"a","type":["null",{"type":"array","items":{"type":"record","name":"I","fields":[{"name":"x","type":"int"}]}}],"default":null}`),
			field:  "a[].y", errContains: "without a default"},
		{name: "record renamed", reader: `{"type":"record","name":"S","fields":[]}`, writer: `{"type":"record","name":"R","fields":[]}`,
			errContains: "record name changed"},
		{name: "enum symbol removed", reader: rec(`{"name":"e","type":{"type":"enum","name":"E","symbols":["A"]}}`), writer: rec(`{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}}`),
			field: "e", errContains: `symbol "B" removed`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckBackward(tc.reader, tc.writer)
			if tc.errContains == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrIncompatible)
			assert.ErrorContains(t, err, tc.errContains)
			var ie *IncompatibleError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, tc.field, ie.Field)
		})
	}
}

// TestIntegrationRegistryPrepare registers a stream's subjects on srfake and
// on the registry of deploy/local (Apicurio Registry): Confluent-framed
// records with the registered ids, the same ids for the same schemas, a new
// id for a compatible change, and an incompatible change that the registry's
// verdict decides (refused by Apicurio, accepted with a warning by srfake).
// Named TestIntegration* so that make test's integration pass runs it
// against the real registry.
func TestIntegrationRegistryPrepare(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	for _, b := range testenv.RegistryBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			cl, err := sr.NewClient(sr.URLs(b.Addr))
			require.NoError(t, err)
			topic := testenv.UniqueName(t, "encode")
			reg := NewRegistry(cl)
			s1 := arrow.NewSchema([]arrow.Field{req("_block_num", arrow.PrimitiveTypes.Uint64), req("id", arrow.BinaryTypes.String)}, nil)
			cfg := Config{Stream: "s", Topic: topic, KeyColumns: []string{"id"}}
			enc := newTestEncoder(t, cfg, s1)
			require.NoError(t, reg.Prepare(ctx, topic, enc))
			vid, ok := enc.ValueFraming().ID()
			require.True(t, ok)
			kid, ok := enc.KeyFraming().ID()
			require.True(t, ok)

			// Values and keys are Confluent-framed and decode with the registered schema.
			rec := newGen(5, mem).batch(s1, 3)
			defer rec.Release()
			var out Batch
			require.NoError(t, enc.Encode(rec, BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(1, 2)}}, &out))
			v := out.Value(0)
			assert.Equal(t, []byte{0, byte(vid >> 24), byte(vid >> 16), byte(vid >> 8), byte(vid)}, v[:5])
			text, err := NewRegistry(cl).SchemaText(ctx, vid)
			require.NoError(t, err)
			codec, err := goavro.NewCodec(text)
			require.NoError(t, err)
			_, rest, err := codec.NativeFromBinary(v[5:])
			require.NoError(t, err)
			assert.Empty(t, rest)
			assert.Equal(t, byte(0), out.Key(0)[0])

			// The same schemas again: same ids, no new version.
			enc2 := newTestEncoder(t, cfg, s1)
			require.NoError(t, NewRegistry(cl).Prepare(ctx, topic, enc2))
			assert.Equal(t, enc.ValueFraming(), enc2.ValueFraming())
			assert.Equal(t, enc.KeyFraming(), enc2.KeyFraming())
			vers, err := cl.SubjectVersions(ctx, ValueSubject(topic))
			require.NoError(t, err)
			assert.Len(t, vers, 1)

			// A nullable column added: compatible, new id.
			s2 := arrow.NewSchema(append(s1.Fields(), opt("extra", arrow.PrimitiveTypes.Int64)), nil)
			enc3 := newTestEncoder(t, cfg, s2)
			require.NoError(t, reg.Prepare(ctx, topic, enc3))
			vid3, _ := enc3.ValueFraming().ID()
			assert.NotEqual(t, vid, vid3)
			kid3, _ := enc3.KeyFraming().ID()
			assert.Equal(t, kid, kid3)

			// A non-nullable column added, under BACKWARD: the registry's
			// verdict decides. A registry that enforces it (Apicurio, a
			// Confluent registry) refuses it before anything is produced; the
			// error has what the registry said and the field the bridge's check
			// names; nothing is registered. srfake accepts every schema: the
			// bridge registers it and warns, naming the field.
			for _, res := range cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatBackward}, ValueSubject(topic)) {
				require.NoError(t, res.Err)
			}
			var logs bytes.Buffer
			reg = NewRegistry(cl, WithRegistryLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			s3 := arrow.NewSchema(append(s2.Fields(), req("required", arrow.PrimitiveTypes.Int64)), nil)
			enc4 := newTestEncoder(t, cfg, s3)
			before := enc4.ValueFraming()
			err = reg.Prepare(ctx, topic, enc4)
			if b.Name == "srfake" {
				require.NoError(t, err, "srfake's verdict is yes")
				assert.Contains(t, logs.String(), "not BACKWARD compatible")
				assert.Contains(t, logs.String(), "field=before.required")
				return
			}
			require.ErrorIs(t, err, ErrIncompatible)
			var ie *IncompatibleError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, ValueSubject(topic), ie.Subject)
			assert.Equal(t, "before.required", ie.Field)
			assert.NotEmpty(t, ie.Registry, "the registry's own words")
			assert.Contains(t, err.Error(), "the registry refused the new schema")
			assert.Contains(t, err.Error(), "nothing was registered or published; to go on")
			t.Logf("the refusal: %v", err)
			assert.Equal(t, before, enc4.ValueFraming(), "encoder unchanged on error")
			vers, err = cl.SubjectVersions(ctx, ValueSubject(topic))
			require.NoError(t, err)
			assert.Len(t, vers, 2)
		})
	}
}
