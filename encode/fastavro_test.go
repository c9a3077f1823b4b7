package encode

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// jsonNormal turns the Go normal form into what fastavro_decode.py prints:
// bytes as "hex:…", numbers through JSON.
func jsonNormal(t testing.TB, v any) any {
	var conv func(any) any
	conv = func(v any) any {
		switch x := v.(type) {
		case []byte:
			return "hex:" + hex.EncodeToString(x)
		case map[string]any:
			out := map[string]any{}
			for k, e := range x {
				out[k] = conv(e)
			}
			return out
		case []any:
			out := []any{}
			for _, e := range x {
				out = append(out, conv(e))
			}
			return out
		}
		return v
	}
	b, err := json.Marshal(conv(v))
	require.NoError(t, err)
	var out any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&out))
	return out
}

// TestIntegrationFastavroDecodes has Python fastavro (an Avro implementation
// nobody here wrote, not in Go) decode the records of the three EVM tables,
// Confluent-framed and single-object framed (the header's fingerprint
// checked against fastavro's of the schema), and compares every envelope
// with the Arrow rows.
func TestIntegrationFastavroDecodes(t *testing.T) {
	py := testenv.Python(t)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	script, err := filepath.Abs(filepath.Join("testdata", "fastavro_decode.py"))
	require.NoError(t, err)
	tables := []struct {
		name string
		rec  func() arrow.RecordBatch
	}{
		{"blocks", func() arrow.RecordBatch { return newGen(1, mem).batch(blocksSchema(), 100) }},
		{"transactions", func() arrow.RecordBatch { return transactionsBatch(mem, 300, 2) }},
		{"transactions-random", func() arrow.RecordBatch { return newGen(2, mem).batch(transactionsSchema(), 200) }},
		{"logs", func() arrow.RecordBatch { return newGen(3, mem).batch(logsSchema(), 300) }},
	}
	for _, tc := range tables {
		for _, framing := range []string{"42", "single-object"} {
			t.Run(tc.name+"/"+framing, func(t *testing.T) {
				fastavroCheck(t, py, script, "mainnet."+tc.name, tc.rec, framing)
			})
		}
	}
}

// fastavroCheck encodes the rows of newRec() for topic, framed with framing
// (a registry id, or single-object), and has fastavro_decode.py decode them.
func fastavroCheck(t *testing.T, py, script, topic string, newRec func() arrow.RecordBatch, framing string) {
	rec := newRec()
	defer rec.Release()
	enc := newTestEncoder(t, Config{Stream: "eth", Topic: topic, Version: "test"}, rec.Schema())
	if framing == "single-object" {
		f, err := SingleObjectFraming(enc.Schemas().Value)
		require.NoError(t, err)
		enc.SetFraming(f, Framing{})
	} else {
		id, err := strconv.Atoi(framing)
		require.NoError(t, err)
		enc.SetFraming(ConfluentFraming(id), Framing{})
	}
	meta := BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(100, 104)}, TsMs: 1_700_000_000_000}
	var out Batch
	require.NoError(t, enc.Encode(rec, meta, &out))

	dir := t.TempDir()
	var recs []byte
	for i := range out.Len() {
		recs = binary.BigEndian.AppendUint32(recs, uint32(len(out.Value(i))))
		recs = append(recs, out.Value(i)...)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "schema.avsc"), []byte(enc.Schemas().Value), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "records.bin"), recs, 0o600))
	cmd := exec.CommandContext(t.Context(), py, script, filepath.Join(dir, "schema.avsc"), filepath.Join(dir, "records.bin"), framing)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, "fastavro_decode.py: %s", stderr.String())
	var got []any
	dec := json.NewDecoder(bytes.NewReader(stdout))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&got))
	require.Len(t, got, out.Len())

	vt, err := parseSchema(enc.Schemas().Value)
	require.NoError(t, err)
	rowT, _ := vt.fields[1].typ.nullable()
	blk := rec.Column(0)
	for i, g := range got {
		env := g.(map[string]any)
		assert.Nil(t, env["before"])
		assert.Equal(t, "c", env["op"])
		assert.Equal(t, json.Number("1700000000000"), env["ts_ms"])
		require.Equal(t, jsonNormal(t, expectedRow(rowT, rec, i)), env["after"], "row %d", i)
		src := env["source"].(map[string]any)
		assert.Equal(t, reorg.BatchID(meta.Ranges), src["batch_id"])
		assert.Equal(t, jsonNormal(t, expected(prim(kLong), blk, i)), src["block_num"])
		assert.Equal(t, json.Number("100"), src["range_start"])
	}
}
