package encode

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

func TestFormatRangeHeaders(t *testing.T) {
	r1, r2 := testRange(10, 12), testRange(7, 7)
	r2.Network = "base"
	tests := []struct {
		name          string
		ranges        []reorg.BlockRange
		network, span string
	}{
		{"none", nil, "", ""},
		{"one range", []reorg.BlockRange{r1}, "mainnet", "10-12"},
		{"two networks", []reorg.BlockRange{r1, r2}, "mainnet|base", "10-12|7-7"},
		{"wide numbers", []reorg.BlockRange{{Network: "a", Start: 0, End: 1<<64 - 1}, {Network: "b", Start: 24_000_001, End: 24_000_059}},
			"a|b", "0-18446744073709551615|24000001-24000059"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			network, span := FormatRangeHeaders(tc.ranges)
			assert.Equal(t, tc.network, network)
			assert.Equal(t, tc.span, span)
			// Parsing gives the ranges back without their hashes.
			got, err := ParseRangeHeaders(network, span)
			require.NoError(t, err)
			var want []reorg.BlockRange
			for _, r := range tc.ranges {
				want = append(want, reorg.BlockRange{Network: r.Network, Start: r.Start, End: r.End})
			}
			assert.Equal(t, want, got)
		})
	}
}

func TestParseRangeHeadersRejectsMalformed(t *testing.T) {
	for _, tc := range []struct{ network, span, why string }{
		{"mainnet", "", "no span"},
		{"", "1-2", "no network"},
		{"mainnet|base", "1-2", "fewer spans than networks"},
		{"mainnet", "1-2|3-4", "more spans than networks"},
		{"mainnet|", "1-2|3-4", "an empty network"},
		{"mainnet", "12", "no dash"},
		{"mainnet", "-12", "no start"},
		{"mainnet", "1-", "no end"},
		{"mainnet", "1-2-3", "three numbers"},
		{"mainnet", "a-2", "start not a number"},
		{"mainnet", "1-0x2", "end not decimal"},
		{"mainnet", "+1-2", "a sign"},
		{"mainnet", " 1-2", "a space"},
		{"mainnet", "5-4", "end before start"},
		{"mainnet", "1-18446744073709551616", "end above 2^64-1"},
	} {
		t.Run(tc.why, func(t *testing.T) {
			got, err := ParseRangeHeaders(tc.network, tc.span)
			require.ErrorIs(t, err, ErrRangeHeader, "%q %q", tc.network, tc.span)
			assert.Nil(t, got)
		})
	}
}
