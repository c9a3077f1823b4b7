package reorg

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cdc is the model batch store of amp-protocol.md §5.3 (Rust CdcStream): it
// maps a Data seq to its rows, turns Data into Insert and an Undo into one
// Delete that yields the stored batches of the invalidated seqs (nothing
// when none is stored). Watermarks are internal: they prune the store.
type cdc struct {
	store map[uint64][]string
	out   []string
}

func newCDC() *cdc { return &cdc{store: map[uint64][]string{}} }

func (c *cdc) handle(evs []Event, rows []string) {
	for _, e := range evs {
		switch e.Kind {
		case KindData:
			c.store[e.Seq] = rows
			c.out = append(c.out, fmt.Sprintf("Insert#%d", e.Seq))
		case KindUndo:
			var ids []string
			for seq := e.First; seq <= e.Last; seq++ {
				if _, ok := c.store[seq]; ok {
					ids = append(ids, fmt.Sprint(seq))
					delete(c.store, seq)
				}
			}
			if len(ids) > 0 {
				c.out = append(c.out, fmt.Sprintf("Delete#%d[%s]", e.Seq, strings.Join(ids, ",")))
			}
		case KindWatermark:
			if e.HasPrune {
				for seq := range c.store {
					if seq <= e.Prune {
						delete(c.store, seq)
					}
				}
			}
		}
	}
}

func (c *cdc) rows() []string {
	var all []string
	for _, r := range c.store {
		all = append(all, r...)
	}
	slices.Sort(all)
	return all
}

func runCDC(t *testing.T, m *Machine, c *cdc, steps ...step) {
	t.Helper()
	for i, s := range steps {
		evs, err := m.Apply(s.ranges, s.complete, s.rows)
		require.NoError(t, err, "step %d", i)
		var rows []string
		for j := 0; j < s.rows; j++ {
			rows = append(rows, fmt.Sprintf("%s/%d", rangesString(s.ranges), j))
		}
		c.handle(evs, rows)
		if len(evs) > 0 {
			require.NoError(t, m.Commit(evs[len(evs)-1].Seq))
		}
	}
}

func pairs(ends ...uint64) []step {
	var steps []step
	var start uint64
	for _, e := range ends {
		steps = append(steps, D(R(start, e, 0)), W(R(start, e, 0)))
		start = e + 1
	}
	return steps
}

func TestD1_InsertOnly(t *testing.T) {
	c := newCDC()
	runCDC(t, newMachine(t, DefaultRetention, Snapshot{}), c, D(R(0, 10, 0)), W(R(0, 10, 0)))
	assert.Equal(t, []string{"Insert#0"}, c.out)
}

func TestD2_InsertsInOrder(t *testing.T) {
	c := newCDC()
	runCDC(t, newMachine(t, DefaultRetention, Snapshot{}), c, D(R(0, 10, 0)), D(R(11, 20, 0)), D(R(21, 30, 0)), W(R(21, 30, 0)))
	assert.Equal(t, []string{"Insert#0", "Insert#1", "Insert#2"}, c.out)
}

func TestD3_DeleteYieldsOriginalBatches(t *testing.T) {
	c := newCDC()
	m := newMachine(t, DefaultRetention, Snapshot{})
	runCDC(t, m, c, pairs(5, 10, 15, 20)...)
	runCDC(t, m, c, W(R(6, 10, 0)))
	assert.Equal(t, []string{"Insert#0", "Insert#2", "Insert#4", "Insert#6", "Delete#8[2,4,6]"}, c.out)
	assert.Equal(t, []string{"eth 0..=5 (" + H("eth", 0, 5).String() + ")/0"}, c.rows(), "only the rows of 0..=5 remain")
}

func TestD4_DeleteSkipsWatermarkIDs(t *testing.T) {
	c := newCDC()
	m := newMachine(t, DefaultRetention, Snapshot{})
	runCDC(t, m, c, pairs(5, 10, 15, 20, 25)...)
	runCDC(t, m, c, W(R(6, 10, 0)))
	assert.Equal(t, "Delete#10[2,4,6,8]", c.out[len(c.out)-1])
}

func TestD5_RepeatedWatermarkNoDelete(t *testing.T) {
	c := newCDC()
	m := newMachine(t, DefaultRetention, Snapshot{})
	runCDC(t, m, c, pairs(10, 20, 30)...)
	runCDC(t, m, c, W(R(21, 30, 0)))
	assert.Equal(t, []string{"Insert#0", "Insert#2", "Insert#4"}, c.out)
}

func TestD6_CommitAfterDelete(t *testing.T) {
	c := newCDC()
	m := newMachine(t, DefaultRetention, Snapshot{})
	runCDC(t, m, c, pairs(5, 10, 15)...)
	evs, err := m.Apply([]BlockRange{R(6, 10, 0)}, true, 0)
	require.NoError(t, err)
	c.handle(evs, nil)
	require.Equal(t, "Delete#6[2,4]", c.out[len(c.out)-1])
	require.NoError(t, m.Commit(evs[0].Seq), "commit after consuming the delete")
	assert.Equal(t, []Watermark{{Seq: 1, Ranges: []BlockRange{R(0, 5, 0)}}}, m.Snapshot().Watermarks)
	require.NoError(t, m.Commit(evs[1].Seq))
	assert.Equal(t, uint64(7), m.Snapshot().Watermarks[1].Seq)
}
