package sink

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShareCompression checks that ShareCompression gives every copy of the
// Config one compressor (the producers made from them then share its
// encoder pool), none when the Config does not compress, and refuses an
// unknown codec naming the key.
func TestShareCompression(t *testing.T) {
	c := DefaultConfig()
	c.Brokers = []string{"127.0.0.1:9092"}
	for _, codec := range []Compression{CompressionZstd, CompressionLZ4, CompressionGzip, CompressionSnappy} {
		c.Compression = codec
		shared, err := c.ShareCompression()
		require.NoError(t, err)
		require.NotNil(t, shared.compressor, "%s", codec)
		a, b := shared, shared // what the pipeline does: one copy per stream
		assert.Same(t, a.compressor, b.compressor, "%s", codec)
		again, err := c.ShareCompression()
		require.NoError(t, err)
		assert.NotSame(t, again.compressor, shared.compressor, "each call builds its own")
	}
	c.Compression = CompressionNone
	shared, err := c.ShareCompression()
	require.NoError(t, err)
	assert.Nil(t, shared.compressor)
	c.Compression = "brotli"
	_, err = c.ShareCompression()
	require.ErrorContains(t, err, "kafka.compression")
}
