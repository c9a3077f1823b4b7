package offsets

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goldenCheckpointV2 is the golden checkpoint with the schema ids a stream
// with a registry records, across a schema change: the first batch was
// written with schema id 3, the second with 7.
func goldenCheckpointV2() Checkpoint {
	cp := goldenCheckpoint()
	cp.Batches[0].SchemaID = 3
	cp.Batches[1].SchemaID = 7
	return cp
}

// TestMarshalGoldenV2: a checkpoint whose batches record schema ids is
// format 2, byte for byte; one without is still format 1, byte for byte
// what a bridge before format 2 wrote (TestMarshalGolden), so such a bridge
// still loads it.
func TestMarshalGoldenV2(t *testing.T) {
	path := filepath.Join("testdata", "checkpoint_v2.golden.json")
	got, err := Marshal(goldenCheckpointV2())
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./offsets -run TestMarshalGoldenV2 -update to create it")
	assert.Equal(t, string(want), string(got), "the encoding changed: bump FormatVersion and keep reading formats 1 and 2")
	assert.Contains(t, string(got), `{"format":2,`)
	assert.Contains(t, string(got), `"schema_id":3}`)

	cp, err := Unmarshal(want)
	require.NoError(t, err)
	exp := goldenCheckpointV2()
	exp.CommittedAt = exp.CommittedAt.UTC()
	assert.Equal(t, exp, cp)

	// The format-1 golden (written before schema ids) still loads, its
	// batches without an id.
	v1, err := os.ReadFile(filepath.Join("testdata", "checkpoint_v1.golden.json"))
	require.NoError(t, err)
	old, err := Unmarshal(v1)
	require.NoError(t, err)
	for _, b := range old.Batches {
		assert.Zero(t, b.SchemaID)
	}

	bad := goldenCheckpointV2()
	bad.Batches[0].SchemaID = -1
	_, err = Marshal(bad)
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "schema id -1")
}

// TestControlStateOfSchemaIDs: the schema ids travel with the checkpoint
// copy in a control event, so a checkpoint rebuilt from Kafka has them.
func TestControlStateOfSchemaIDs(t *testing.T) {
	cp := goldenCheckpointV2()
	cp.ControlOffset = NoOffset
	b, err := Marshal(cp)
	require.NoError(t, err)
	st, err := ControlStateOf(b, 5)
	require.NoError(t, err)
	assert.Equal(t, 3, st.Batches[0].SchemaID)
	assert.Equal(t, 7, st.Batches[1].SchemaID)
}

// BenchmarkMarshalSchemaIDs is BenchmarkMarshal of a format-2 checkpoint
// (every batch with its schema id), to compare with format 1.
func BenchmarkMarshalSchemaIDs(b *testing.B) {
	cp := testCheckpoint("bench", 1, benchBatches)
	for i := range cp.Batches {
		cp.Batches[i].SchemaID = 100 + i%2
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Marshal(cp); err != nil {
			b.Fatal(err)
		}
	}
}
