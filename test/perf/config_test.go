package perf

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		want        perfConfig
		errContains string
	}{
		{name: "kfake one partition", in: "kfake/p1", want: perfConfig{name: "kfake/p1", broker: "kfake", partitions: 1}},
		{name: "kafka backfill star", in: " kafka/p6/backfill/star", want: perfConfig{name: "kafka/p6/backfill/star", broker: "kafka", partitions: 6, backfill: true, star: true}},
		{name: "unknown broker", in: "redpanda/p1", errContains: "broker kfake or kafka"},
		{name: "no partitions", in: "kfake", errContains: "broker/pN"},
		{name: "bad partitions", in: "kfake/p0", errContains: "partitions"},
		{name: "unknown option", in: "kfake/p1/zstd", errContains: "unknown option"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseConfig(tc.in)
			if tc.errContains != "" {
				require.ErrorContains(t, err, tc.errContains)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
