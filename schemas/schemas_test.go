package schemas_test

import (
	"io/fs"
	"testing"

	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/schemas"
)

func TestEverySchemaParses(t *testing.T) {
	files, err := fs.Glob(schemas.FS, "*.avsc")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{schemas.SourceFile, schemas.WatermarkFile, schemas.UndoFile}, files)
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			b, err := schemas.FS.ReadFile(f)
			require.NoError(t, err)
			c, err := goavro.NewCodec(string(b))
			require.NoError(t, err)
			assert.NotEmpty(t, c.CanonicalSchema())
		})
	}
}

func TestAccessors(t *testing.T) {
	tests := []struct {
		name string
		got  string
		file string
	}{
		{"source", schemas.Source(), schemas.SourceFile},
		{"watermark", schemas.Watermark(), schemas.WatermarkFile},
		{"undo", schemas.Undo(), schemas.UndoFile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := schemas.FS.ReadFile(tc.file)
			require.NoError(t, err)
			assert.Equal(t, string(b), tc.got)
		})
	}
}

// TestSourceFieldOrder pins the field order the encoder's hot path writes.
func TestSourceFieldOrder(t *testing.T) {
	c, err := goavro.NewCodec(schemas.Source())
	require.NoError(t, err)
	assert.Equal(t, `{"name":"amp.bridge.Source","type":"record","fields":[`+
		`{"name":"connector","type":"string"},{"name":"version","type":"string"},{"name":"stream","type":"string"},`+
		`{"name":"network","type":"string"},{"name":"block_num","type":["null","long"]},{"name":"batch_id","type":"string"},`+
		`{"name":"range_start","type":"long"},{"name":"range_end","type":"long"},{"name":"range_hash","type":"string"},`+
		`{"name":"range_prev_hash","type":["null","string"]},{"name":"row","type":"long"},{"name":"snapshot","type":"boolean"},`+
		`{"name":"cause","type":["null","string"]}]}`, c.CanonicalSchema())
}
