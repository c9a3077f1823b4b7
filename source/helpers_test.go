package source_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// H is the Rust test hash of amp-protocol.md §8: [epoch][8-byte BE
// fold(network)][15 zero bytes][8-byte BE n].
func H(network string, epoch uint8, n uint64) reorg.Hash {
	var h reorg.Hash
	h[0] = epoch
	var acc uint64
	for i := 0; i < len(network); i++ {
		acc = acc*31 + uint64(network[i])
	}
	binary.BigEndian.PutUint64(h[1:9], acc)
	binary.BigEndian.PutUint64(h[24:32], n)
	return h
}

// R is R(a..=b, e) on network "eth": hash H(e,b), prev_hash H(e,a-1), or
// null at genesis.
func R(a, b uint64, epoch uint8) reorg.BlockRange {
	return RN("eth", a, b, epoch)
}

// RN is R on another network.
func RN(network string, a, b uint64, epoch uint8) reorg.BlockRange {
	r := reorg.BlockRange{Network: network, Start: a, End: b, Hash: H(network, epoch, b)}
	if a > 0 {
		r.PrevHash, r.HasPrevHash = H(network, epoch, a-1), true
	}
	return r
}

// withPrev returns r with prev_hash p.
func withPrev(r reorg.BlockRange, p reorg.Hash) reorg.BlockRange {
	r.PrevHash, r.HasPrevHash = p, true
	return r
}

// md renders app_metadata.
func md(t testing.TB, complete bool, ranges ...reorg.BlockRange) string {
	t.Helper()
	b, err := source.AppMetadata{Ranges: ranges, Complete: complete}.MarshalJSON()
	require.NoError(t, err)
	return string(b)
}

// D is a 1-row data message, W a 0-row completion, K a 0-row keep-alive.
func D(t testing.TB, ranges ...reorg.BlockRange) msg {
	return msg{rows: 1, md: md(t, false, ranges...)}
}

// W is a completion batch.
func W(t testing.TB, ranges ...reorg.BlockRange) msg { return msg{rows: 0, md: md(t, true, ranges...)} }

// K is a keep-alive batch.
func K(t testing.TB, ranges ...reorg.BlockRange) msg {
	return msg{rows: 0, md: md(t, false, ranges...)}
}
