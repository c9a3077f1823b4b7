package reorg

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

var propCases = flag.Int("reorg.cases", 300, "number of random cases of TestPropertyCanonicalChain")

const traceLines = 60

// TestPropertyCanonicalChain drives the machine with a simulated Amp server
// over a random chain: random reorgs (depth 1 to beyond retention), random
// multi-block microbatches split into several data batches, keep-alives,
// replayed microbatches, stream errors (abort, Rollback, reconnect) and
// crashes (New from the last durable snapshot, with Next persisted at
// commit as the bridge does or after every event as the Rust client does).
// A model Kafka applies the events transactionally (insert on Data,
// retraction of committed batches on Undo, commit at watermarks). Every
// case must end with the visible rows equal to the canonical chain's, or
// with ErrUnrecoverable exactly when the fork point is below every retained
// watermark after retention pruned some.
func TestPropertyCanonicalChain(t *testing.T) {
	var outcomes [2]int
	seen := map[string]int{}
	for i := 0; i < *propCases; i++ {
		seed := uint64(i)
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			unrecoverable := runPropertyCase(t, seed, seen)
			if unrecoverable {
				outcomes[1]++
			} else {
				outcomes[0]++
			}
		})
		if !ok {
			break
		}
	}
	if *propCases >= 100 {
		require.Positive(t, outcomes[0], "no case converged")
		require.Positive(t, outcomes[1], "no case reached an unrecoverable reorg")
		for _, path := range []string{"reorg", "retract", "abort", "replay", "reconnect", "rewind", "f4-drop", "prune"} {
			require.Positive(t, seen[path], "no case took path %q", path)
		}
	}
	t.Logf("paths taken: %v", seen)
	t.Logf("%d cases converged to the canonical chain, %d ended with ErrUnrecoverable", outcomes[0], outcomes[1])
}

// simChain is a chain whose blocks may be replaced by reorgs.
type simChain struct {
	canon  []Hash
	parent map[Hash]Hash
	number map[Hash]uint64
	ver    uint64
}

func (c *simChain) mine() {
	c.ver++
	n := uint64(len(c.canon))
	var h Hash
	binary.BigEndian.PutUint64(h[0:8], c.ver)
	binary.BigEndian.PutUint64(h[24:32], n)
	if n > 0 {
		c.parent[h] = c.canon[n-1]
	}
	c.number[h] = n
	c.canon = append(c.canon, h)
}

func (c *simChain) reorg(depth uint64) {
	c.canon = c.canon[:uint64(len(c.canon))-depth]
	for range depth {
		c.mine()
	}
}

func rowsOf(h Hash) []string {
	n := int(h[7]+h[31]) % 3
	rows := make([]string, n)
	for i := range rows {
		rows[i] = fmt.Sprintf("%d/%s/%d", binary.BigEndian.Uint64(h[24:32]), h.String()[2:18], i)
	}
	return rows
}

type simMsg struct {
	r        BlockRange
	complete bool
	rows     []string
}

// simServer is the Amp server's streaming behaviour (amp-protocol.md §2.5,
// §3.2): one microbatch at a time; the next starts after the previous end
// when its hash is canonical, else after the common ancestor.
type simServer struct {
	chain    *simChain
	hasEnd   bool
	end      uint64
	endHash  Hash
	queue    []simMsg
	lastMB   []simMsg
	maxBlock uint64
}

func (s *simServer) connect(c Cursor) {
	s.queue, s.lastMB = nil, nil
	p, ok := c["eth"]
	s.hasEnd, s.end, s.endHash = ok, p.Number, p.Hash
}

// startMicrobatch queues the next microbatch; false when the server is at
// the head.
func (s *simServer) startMicrobatch(rng *rand.Rand) bool {
	c := s.chain
	var start uint64
	if s.hasEnd {
		h := s.endHash
		for {
			n := c.number[h]
			if c.canon[n] == h {
				start = n + 1
				break
			}
			p, ok := c.parent[h]
			if !ok { // even block 0 was replaced
				start = 0
				break
			}
			h = p
		}
	}
	head := uint64(len(c.canon) - 1)
	if start > head {
		return false
	}
	end := min(head, start+rng.Uint64N(s.maxBlock))
	r := BlockRange{Network: "eth", Start: start, End: end, Hash: c.canon[end]}
	if start > 0 {
		r.PrevHash, r.HasPrevHash = c.canon[start-1], true
	}
	var rows []string
	for n := start; n <= end; n++ {
		rows = append(rows, rowsOf(c.canon[n])...)
	}
	var mb []simMsg
	if rng.IntN(4) == 0 {
		mb = append(mb, simMsg{r: r}) // keep-alive
	}
	parts := 1 + rng.IntN(3)
	for i := 0; i < parts && len(rows) > 0; i++ {
		k := len(rows)
		if i < parts-1 {
			k = rng.IntN(len(rows) + 1)
		}
		mb = append(mb, simMsg{r: r, rows: rows[:k]})
		rows = rows[k:]
	}
	mb = append(mb, simMsg{r: r, complete: true})
	s.queue = append(s.queue, mb...)
	s.lastMB = mb
	s.hasEnd, s.end, s.endHash = true, end, c.canon[end]
	return true
}

// kafkaModel is the visible content of the data topic plus the open
// transaction, as the bridge's sink keeps them.
type kafkaModel struct {
	visible  map[string]int
	batchLog map[uint64][]string // committed watermark seq -> its rows

	txRows    []string
	txRetract []uint64
	txBatches map[uint64][]string
	curRows   []string
	txLast    uint64
	txAny     bool
}

func (k *kafkaModel) abort() {
	k.txRows, k.txRetract, k.curRows, k.txAny = nil, nil, nil, false
	k.txBatches = map[uint64][]string{}
}

func (k *kafkaModel) commit() {
	for _, seq := range k.txRetract {
		for _, r := range k.batchLog[seq] {
			k.visible[r]--
			if k.visible[r] == 0 {
				delete(k.visible, r)
			}
		}
		delete(k.batchLog, seq)
	}
	for _, r := range k.txRows {
		k.visible[r]++
	}
	maps.Copy(k.batchLog, k.txBatches)
	k.abort()
}

// retModel is an independent model of the retained watermarks, to decide
// whether a reorg is recoverable.
type retModel struct {
	retention uint64
	wms       []Watermark
	pruned    bool
	// cut is the highest cutoff (newest start minus retention) any prune
	// applied: Config.Retention promises that a fork at or after it is
	// recoverable, whichever watermarks the model keeps.
	cut uint64
}

func (r *retModel) watermark(w Watermark) {
	r.wms = append(r.wms, w)
	latest := w.Ranges[0]
	if latest.Start < r.retention {
		return
	}
	cut := latest.Start - r.retention
	k := 0
	for k < len(r.wms)-1 && r.wms[k].Ranges[0].End < cut {
		k++
	}
	// The newest watermark beyond the cutoff stays: the recovery point of a
	// fork at the cutoff.
	if k > 1 {
		r.wms, r.pruned = slices.Clone(r.wms[k-1:]), true
		r.cut = max(r.cut, cut)
	}
}

func (r *retModel) undo(first uint64) {
	r.wms = slices.DeleteFunc(slices.Clone(r.wms), func(w Watermark) bool { return w.Seq >= first })
}

func (r *retModel) recoverable(fork uint64) bool {
	if !r.pruned {
		return true
	}
	for _, w := range r.wms {
		if w.Ranges[0].End < fork {
			return true
		}
	}
	return false
}

func runPropertyCase(t *testing.T, seed uint64, seen map[string]int) (unrecoverable bool) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	retention := []uint64{0, 1, 2, 4, 8, 16, 128}[rng.IntN(7)]
	rustMode := rng.IntN(3) == 0
	cfg := Config{Retention: retention}
	chain := &simChain{parent: map[Hash]Hash{}, number: map[Hash]uint64{}}
	for range 1 + rng.IntN(5) {
		chain.mine()
	}
	srv := &simServer{chain: chain, maxBlock: 1 + rng.Uint64N(5)}
	k := &kafkaModel{visible: map[string]int{}, batchLog: map[uint64][]string{}}
	k.abort()
	model := &retModel{retention: retention}
	committedModel := *model

	m, err := New(cfg, Snapshot{})
	require.NoError(t, err)
	durable := m.Snapshot()
	durableNext := uint64(0)
	var log []string
	logf := func(format string, args ...any) { log = append(log, fmt.Sprintf(format, args...)) }
	defer func() {
		if t.Failed() {
			t.Logf("retention %d, rust mode %t, trace:", retention, rustMode)
			for _, l := range log[max(0, len(log)-traceLines):] {
				t.Log(l)
			}
		}
	}()

	restart := func(why string) {
		k.abort()
		snap := durable
		if rustMode && durableNext > snap.Next {
			snap.Next = durableNext
		}
		var err error
		m, err = New(cfg, snap)
		require.NoError(t, err)
		*model = committedModel
		model.wms = slices.Clone(model.wms)
		srv.connect(snap.Cursor())
		logf("%s: restart from %v next %d", why, snap.Cursor(), snap.Next)
	}
	commit := func(seq uint64) {
		k.commit()
		require.NoError(t, m.Commit(seq))
		durable = m.Snapshot()
		committedModel = *model
		committedModel.wms = slices.Clone(model.wms)
		logf("commit %d", seq)
	}

	// deliver feeds one message; it returns false when the case ended with
	// ErrUnrecoverable.
	deliver := func(msg simMsg, commitProb int) bool {
		prev := m.Previous()
		replays := m.Replays()
		evs, err := m.Apply([]BlockRange{msg.r}, msg.complete, len(msg.rows))
		logf("apply %s complete=%t rows=%d -> %s err=%v", msg.r, msg.complete, len(msg.rows), brief(evs), err)
		var rc *ReconnectError
		switch {
		case err == nil:
		case errors.As(err, &rc):
		case errors.Is(err, ErrUnrecoverable):
			require.Empty(t, evs)
			require.Len(t, prev, 1)
			require.False(t, model.recoverable(msg.r.Start), "ErrUnrecoverable although a retained watermark ends before block %d: %v",
				msg.r.Start, err)
			require.Less(t, msg.r.Start, model.cut, "ErrUnrecoverable for a fork at block %d, within retention %d of a newest watermark (cutoff %d): %v",
				msg.r.Start, retention, model.cut, err)
			return false
		default:
			require.NoError(t, err, "the simulated server is protocol-faithful")
		}
		if rustMode {
			durableNext = m.Next()
		}
		if rc != nil {
			seen["reconnect"]++
		}
		if len(evs) == 0 && replays < m.Replays() {
			seen["f4-drop"]++
		}
		for _, ev := range evs {
			k.txAny, k.txLast = true, ev.Seq
			switch ev.Kind {
			case KindData:
				k.curRows = append(k.curRows, msg.rows...)
				k.txRows = append(k.txRows, msg.rows...)
			case KindWatermark:
				k.txBatches[ev.Seq] = k.curRows
				k.curRows = nil
				model.watermark(Watermark{Seq: ev.Seq, Ranges: ev.Ranges})
				if ev.HasPrune {
					seen["prune"]++
				}
				if rng.IntN(100) < commitProb {
					commit(ev.Seq)
				}
			case KindUndo:
				require.LessOrEqual(t, ev.First, ev.Last)
				seen[ev.Cause.String()]++
				if len(ev.Retract) > 0 {
					seen["retract"]++
				}
				if ev.Abort {
					seen["abort"]++
				}
				if ev.Replay {
					seen["replay"]++
				}
				if ev.Cause == CauseReorg {
					require.Len(t, ev.Invalidations, 1)
					require.Equal(t, msg.r.Start, ev.Invalidations[0].Start)
					require.True(t, model.recoverable(ev.Invalidations[0].Start),
						"recovered a reorg at %d although the model says it is below retention", msg.r.Start)
				}
				model.undo(ev.First)
				if ev.Replay {
					k.abort()
					m.Rollback()
					*model = committedModel
					model.wms = slices.Clone(model.wms)
					srv.connect(m.Snapshot().Cursor())
					logf("undo replay: rollback to %v", m.Snapshot().Cursor())
					return true
				}
				if ev.Abort {
					k.abort()
					k.txAny, k.txLast = true, ev.Seq
				}
				require.Empty(t, k.curRows, "an Undo without Abort leaves no uncommitted rows")
				for _, w := range ev.Retract {
					_, ok := k.batchLog[w.Seq]
					require.True(t, ok, "retracting watermark %d that is not committed", w.Seq)
					k.txRetract = append(k.txRetract, w.Seq)
				}
			}
		}
		if rc != nil {
			srv.connect(rc.Cursor)
			logf("reconnect with %v", rc.Cursor)
		}
		if msg.complete && rng.IntN(20) == 0 && len(srv.lastMB) > 0 {
			srv.queue = append(slices.Clone(srv.lastMB), srv.queue...) // F4 replay
		}
		return true
	}

	steps := 100 + rng.IntN(200)
	for range steps {
		switch x := rng.IntN(100); {
		case x < 60:
			if len(srv.queue) == 0 && !srv.startMicrobatch(rng) {
				chain.mine()
				continue
			}
			msg := srv.queue[0]
			srv.queue = srv.queue[1:]
			if !deliver(msg, 60) {
				return true
			}
		case x < 80:
			for range 1 + rng.IntN(3) {
				chain.mine()
			}
		case x < 86:
			head := uint64(len(chain.canon))
			depth := 1 + rng.Uint64N(min(head, 3))
			if rng.IntN(4) == 0 {
				depth = 1 + rng.Uint64N(min(head, retention+12))
			}
			chain.reorg(depth)
			for range rng.IntN(3) {
				chain.mine()
			}
			logf("reorg depth %d, head %d", depth, len(chain.canon)-1)
		case x < 90:
			restart("crash")
		case x < 94:
			if rustMode {
				restart("stream error")
				continue
			}
			k.abort()
			m.Rollback()
			*model = committedModel
			model.wms = slices.Clone(model.wms)
			srv.connect(m.Snapshot().Cursor())
			logf("stream error: rollback to %v", m.Snapshot().Cursor())
		default:
			// A transaction closes only between microbatches (the
			// bridge closes it at watermarks).
			if k.txAny && len(k.curRows) == 0 {
				commit(k.txLast)
			}
		}
	}
	// Drain: no more chain changes; deliver until the server is idle.
	for range 10000 {
		if len(srv.queue) == 0 && !srv.startMicrobatch(rng) {
			break
		}
		msg := srv.queue[0]
		srv.queue = srv.queue[1:]
		if !deliver(msg, 100) {
			return true
		}
	}
	require.Empty(t, srv.queue, "the server did not reach the head")
	if k.txAny {
		commit(k.txLast)
	}
	var want []string
	for _, h := range chain.canon {
		want = append(want, rowsOf(h)...)
	}
	var got []string
	for r, n := range k.visible {
		for range n {
			got = append(got, r)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	require.Equal(t, want, got, "visible rows differ from the canonical chain")
	head := uint64(len(chain.canon) - 1)
	require.Equal(t, Cursor{"eth": {Number: head, Hash: chain.canon[head]}}, m.Snapshot().Cursor())
	return false
}
