package encode

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSanitizeName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"block_num", "block_num"},
		{"", "_"},
		{"1st", "_1st"},
		{"weird name-1", "weird_name_1"},
		{"ünï", "_n_"},
		{"a.b", "a_b"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, sanitizeName(tc.in), tc.in)
	}
	assert.Equal(t, "eth_mainnet.tx_s", sanitizeNamespace("eth-mainnet..tx$s"))
}

func TestSchemaErrors(t *testing.T) {
	tests := []struct {
		name        string
		cfg         Config
		fields      []arrow.Field
		errContains string
	}{
		{"collision", Config{Stream: "s"}, []arrow.Field{req("a-b", arrow.PrimitiveTypes.Int32), req("a_b", arrow.PrimitiveTypes.Int32)},
			`columns "a-b" and "a_b" both become Avro field "a_b"`},
		{"nested collision", Config{Stream: "s"}, []arrow.Field{req("s", arrow.StructOf(req("x y", arrow.PrimitiveTypes.Int32), req("x_y", arrow.PrimitiveTypes.Int32)))},
			`columns "x y" and "x_y"`},
		{"flat meta collision", Config{Stream: "s", Envelope: EnvelopeFlat}, []arrow.Field{req("_amp_op", arrow.BinaryTypes.String)},
			`"_amp_op"`},
		{"unsupported type", Config{Stream: "s"}, []arrow.Field{req("d", arrow.FixedWidthTypes.Duration_s)},
			`column "d" has type duration`},
		{"unsupported map key", Config{Stream: "s"}, []arrow.Field{req("m", arrow.MapOf(arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int32))},
			"Avro map keys are strings"},
		{"missing key column", Config{Stream: "s", KeyColumns: []string{"nope"}}, []arrow.Field{req("a", arrow.PrimitiveTypes.Int32)},
			`key_columns names "nope"`},
		{"bad stream", Config{Stream: "Bad Stream"}, []arrow.Field{req("a", arrow.PrimitiveTypes.Int32)},
			"want [a-z0-9_.-]+"},
		{"bad namespace", Config{Stream: "s", Namespace: "a-b"}, []arrow.Field{req("a", arrow.PrimitiveTypes.Int32)},
			`namespace "a-b"`},
		{"duplicate key column", Config{Stream: "s", KeyColumns: []string{"a", "a"}}, []arrow.Field{req("a", arrow.PrimitiveTypes.Int32)},
			"listed twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BuildSchemas(tc.cfg, arrow.NewSchema(tc.fields, nil))
			require.Error(t, err)
			assert.ErrorContains(t, err, tc.errContains)
		})
	}
}

func TestSchemaShape(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{
		req("a", arrow.StructOf(req("b", arrow.StructOf(req("c", arrow.PrimitiveTypes.Int32))))),
		req("a_b", arrow.StructOf(req("c", arrow.PrimitiveTypes.Int32))),
		opt("9x", fsb(32)),
		req("y", fsb(32)),
	}, nil)
	got, err := BuildSchemas(Config{Stream: "my-stream"}, s)
	require.NoError(t, err)
	assert.Equal(t, "amp.my_stream", got.Namespace)
	assert.Equal(t, `{"type":"record","name":"Value","namespace":"amp.my_stream","fields":[`+
		`{"name":"a","type":{"type":"record","name":"Value_a","namespace":"amp.my_stream","fields":[`+
		`{"name":"b","type":{"type":"record","name":"Value_a_b","namespace":"amp.my_stream","fields":[{"name":"c","type":"int"}]}}]}},`+
		`{"name":"a_b","type":{"type":"record","name":"Value_a_b_2","namespace":"amp.my_stream","fields":[{"name":"c","type":"int"}]}},`+
		`{"name":"_9x","type":["null",{"type":"fixed","name":"Bytes32","namespace":"amp.my_stream","size":32}],"default":null,"doc":"Arrow column \"9x\""},`+
		`{"name":"y","type":"amp.my_stream.Bytes32"}]}`, got.Row)
	for _, sc := range []string{got.Row, got.Value} {
		_, err := goavro.NewCodec(sc)
		require.NoError(t, err)
	}
	assert.Empty(t, got.Key)
}

func TestConfigParse(t *testing.T) {
	e, err := ParseEnvelope("flat")
	require.NoError(t, err)
	assert.Equal(t, EnvelopeFlat, e)
	_, err = ParseEnvelope("upsert")
	assert.ErrorContains(t, err, `want "debezium" or "flat"`)
	f, err := ParseFixedAs("hex")
	require.NoError(t, err)
	assert.Equal(t, FixedAsHex, f)
	_, err = ParseFixedAs("base64")
	assert.ErrorContains(t, err, `want "fixed", "hex" or "bytes"`)
	assert.Equal(t, "debezium", EnvelopeDebezium.String())
	assert.Equal(t, "hex", FixedAsHex.String())
	f, err = ParseFixedAs("bytes")
	require.NoError(t, err)
	assert.Equal(t, FixedAsBytes, f)
	assert.Equal(t, "bytes", FixedAsBytes.String())
}

func TestEncodeRejectsWrongInput(t *testing.T) {
	s := logsSchema()
	enc := newTestEncoder(t, Config{Stream: "s"}, s)
	other := arrow.NewSchema([]arrow.Field{req("x", arrow.PrimitiveTypes.Int32)}, nil)
	enc2 := newTestEncoder(t, Config{Stream: "s"}, other)
	tests := []struct {
		name        string
		meta        BatchMeta
		errContains string
	}{
		{"no ranges", BatchMeta{Op: OpCreate}, "no block ranges"},
		{"bad op", BatchMeta{Op: 'x', Ranges: nil}, `op 'x'`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := newGen(1, memory.DefaultAllocator).batch(s, 1)
			defer rec.Release()
			var out Batch
			assert.ErrorContains(t, enc.Encode(rec, tc.meta, &out), tc.errContains)
			assert.ErrorContains(t, enc2.Encode(rec, tc.meta, &out), "Arrow schema differs")
			assert.Equal(t, 0, out.Len())
		})
	}
}
