package reorg

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// H is the Rust test hash of amp-protocol.md §8: [epoch][8-byte BE
// fold(network)][15 zero bytes][8-byte BE n].
func H(network string, epoch byte, n uint64) Hash {
	var acc uint64
	for i := 0; i < len(network); i++ {
		acc = acc*31 + uint64(network[i])
	}
	var h Hash
	h[0] = epoch
	binary.BigEndian.PutUint64(h[1:9], acc)
	binary.BigEndian.PutUint64(h[24:32], n)
	return h
}

// Rn is R(a..=b, e) on network net: hash H(e, b), prev_hash H(e, a-1), null
// at genesis.
func Rn(net string, a, b uint64, e byte) BlockRange {
	r := BlockRange{Network: net, Start: a, End: b, Hash: H(net, e, b)}
	if a > 0 {
		r.PrevHash, r.HasPrevHash = H(net, e, a-1), true
	}
	return r
}

// R is Rn on network "eth".
func R(a, b uint64, e byte) BlockRange { return Rn("eth", a, b, e) }

// withPrev returns r with prev_hash p.
func withPrev(r BlockRange, p Hash) BlockRange {
	r.PrevHash, r.HasPrevHash = p, true
	return r
}

// step is one envelope.
type step struct {
	ranges   []BlockRange
	complete bool
	rows     int
}

// D is a data batch with one row; W is a completion batch.
func D(rs ...BlockRange) step { return step{ranges: rs, rows: 1} }
func W(rs ...BlockRange) step { return step{ranges: rs, complete: true} }

// K is a keep-alive: no rows, not complete.
func K(rs ...BlockRange) step { return step{ranges: rs} }

func newMachine(t testing.TB, retention uint64, snap Snapshot) *Machine {
	t.Helper()
	m, err := New(Config{Retention: retention}, snap)
	require.NoError(t, err)
	return m
}

// feed applies steps, committing after every envelope (the default of
// amp-protocol.md §8.3), and returns the events.
func feed(t testing.TB, m *Machine, steps ...step) []Event {
	t.Helper()
	var all []Event
	for i, s := range steps {
		evs, err := m.Apply(s.ranges, s.complete, s.rows)
		require.NoError(t, err, "step %d", i)
		all = append(all, evs...)
		if len(evs) > 0 {
			require.NoError(t, m.Commit(evs[len(evs)-1].Seq))
		}
	}
	return all
}

// brief formats events compactly: D#0, W#1, W#7/p3, U#3:reorg:2..=2.
func brief(evs []Event) string {
	parts := make([]string, len(evs))
	for i, e := range evs {
		switch e.Kind {
		case KindData:
			parts[i] = fmt.Sprintf("D#%d", e.Seq)
		case KindWatermark:
			parts[i] = fmt.Sprintf("W#%d", e.Seq)
			if e.HasPrune {
				parts[i] += fmt.Sprintf("/p%d", e.Prune)
			}
		case KindUndo:
			parts[i] = fmt.Sprintf("U#%d:%s:%d..=%d", e.Seq, e.Cause, e.First, e.Last)
		default:
			parts[i] = e.String()
		}
	}
	return strings.Join(parts, " ")
}
