package encode

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/schemas"
)

func TestCRC64AvroVectors(t *testing.T) {
	// Vectors from goavro's rabin_test.go (the Avro specification's
	// CRC-64-AVRO of the canonical forms "int" and "string").
	tests := []struct {
		in   string
		want uint64
	}{
		{`"int"`, 0x7275d51a3f395c8f},
		{`"string"`, 0x8f014872634503c7},
		{``, 0xc15d213aa4d7a795},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, CRC64Avro([]byte(tc.in)), tc.in)
	}
	for _, s := range []string{schemas.Source(), schemas.Watermark(), schemas.Undo()} {
		c, err := goavro.NewCodec(s)
		require.NoError(t, err)
		fp, err := Fingerprint(s)
		require.NoError(t, err)
		assert.Equal(t, c.Rabin, fp)
	}
}

// TestCanonicalFormIsJavas: the Parsing Canonical Form and fingerprint of
// testdata/canonical.avsc (nested records with namespaces of their own and
// inherited ones, references, logical types, enum, fixed, array, map,
// recursion, docs, defaults and aliases to strip) are those Apache Avro
// 1.12.2's Java SchemaNormalization computed (toParsingForm into
// testdata/canonical.java.pcf, parsingFingerprint64 below; fastavro 1.13.1
// computes the same), and the envelopes' differ from goavro's, which
// earlier bridges wrote (EarlierSingleObjectFramings).
func TestCanonicalFormIsJavas(t *testing.T) {
	schema, err := os.ReadFile(filepath.Join("testdata", "canonical.avsc"))
	require.NoError(t, err)
	want, err := os.ReadFile(filepath.Join("testdata", "canonical.java.pcf"))
	require.NoError(t, err)
	got, err := CanonicalForm(string(schema))
	require.NoError(t, err)
	assert.Equal(t, string(want), got)
	fp, err := Fingerprint(string(schema))
	require.NoError(t, err)
	assert.Equal(t, uint64(0x5609fffcbc6fadf5), fp, "Java's parsingFingerprint64")
	so, err := SingleObjectFraming(string(schema))
	require.NoError(t, err)
	earlier := EarlierSingleObjectFramings(string(schema))
	require.NotEmpty(t, earlier, "goavro names the nested types wrongly")
	assert.NotContains(t, earlier, so)
	// A real envelope: goavro's form of it is stable, and it is what
	// earlier bridges wrote.
	rec := transactionsBatch(memory.NewGoAllocator(), 1, 1)
	defer rec.Release()
	env := newTestEncoder(t, Config{Stream: "eth", Topic: "mainnet.transactions", Version: "test"}, rec.Schema()).Schemas().Value
	c, err := goavro.NewCodec(env)
	require.NoError(t, err)
	earlier = EarlierSingleObjectFramings(env)
	require.Len(t, earlier, 1)
	efp, _ := earlier[0].SchemaFingerprint()
	assert.Equal(t, CRC64Avro([]byte(c.CanonicalSchema())), efp, "goavro's fingerprint, as earlier bridges wrote")
	so, err = SingleObjectFraming(env)
	require.NoError(t, err)
	assert.NotEqual(t, so, earlier[0])
	// The control topic's schemas have the same fingerprint either way:
	// their framing did not change.
	for _, s := range []string{schemas.Source(), schemas.Watermark(), schemas.Undo()} {
		assert.Empty(t, EarlierSingleObjectFramings(s))
	}
}

func TestFramingBytes(t *testing.T) {
	f := ConfluentFraming(0x01020304)
	assert.Equal(t, []byte{0, 1, 2, 3, 4}, f.AppendHeader(nil))
	assert.Equal(t, 5, f.HeaderLen())
	got, body, err := ParseHeader([]byte{0, 1, 2, 3, 4, 0xAA})
	require.NoError(t, err)
	assert.Equal(t, f, got)
	assert.Equal(t, []byte{0xAA}, body)

	// Single-object: the header goavro writes for the same schema.
	schema := `{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}`
	so, err := SingleObjectFraming(schema)
	require.NoError(t, err)
	c, err := goavro.NewCodec(schema)
	require.NoError(t, err)
	want, err := c.SingleFromNative(nil, map[string]any{"a": int64(1)})
	require.NoError(t, err)
	hdr := so.AppendHeader(nil)
	assert.Equal(t, want[:10], hdr)
	assert.Equal(t, 10, so.HeaderLen())
	got, body, err = ParseHeader(want)
	require.NoError(t, err)
	assert.Equal(t, so, got)
	assert.Equal(t, []byte{2}, body)

	_, _, err = ParseHeader([]byte{0xC3})
	require.ErrorIs(t, err, ErrFraming)
	assert.Empty(t, Framing{}.AppendHeader(nil))
}
