package reorg

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzMachine runs a script decoded from the input: deliveries from a
// simulated Amp server over a chain with reorgs, arbitrary (often invalid)
// ranges, commits, rollbacks and restarts. Invariants:
//
//   - the machine never panics, and returns only a *ValidationError, an
//     *UnrecoverableError (both leaving the state unchanged) or a
//     *ReconnectError;
//   - event sequence numbers increase by one per event, and an Undo covers
//     First <= Last < its own Seq;
//   - an invalidation always covers the overlapping range: for every
//     incoming range that differs from the previous one and starts at or
//     before its end, the Undo names that network from at most the incoming
//     start to at least the larger end;
//   - Retract lists only committed watermarks within First..=Last;
//   - the committed watermark never goes backwards except through a
//     committed Undo, and the committed Next never decreases;
//   - Snapshot() always validates and a new machine starts from it.
func FuzzMachine(f *testing.F) {
	f.Add([]byte{4, 0, 1, 1, 2, 0, 0, 0, 1, 2, 5, 0, 0, 3, 2, 1, 0, 3, 3})
	f.Add([]byte{0, 0, 5, 2, 2, 0, 0, 5, 0, 0, 3, 9, 2, 0, 4, 1, 6, 0, 0, 0, 7, 7})
	f.Add([]byte{1, 4, 10, 20, 4, 0, 0, 4, 30, 25, 0, 1, 1, 2, 0, 0, 3, 1, 1, 0, 9, 9, 2, 0, 0, 5, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) { fuzzMachine(t, data, nil) })
}

// fuzzMachine is FuzzMachine's body; stats, when not nil, counts the
// outcomes met (to pick seeds).
func fuzzMachine(t *testing.T, data []byte, stats map[string]int) {
	{
		if len(data) == 0 {
			return
		}
		cfg := Config{Retention: uint64(data[0] % 9)}
		data = data[1:]
		chain := &simChain{parent: map[Hash]Hash{}, number: map[Hash]uint64{}}
		chain.mine()
		srv := &simServer{chain: chain, maxBlock: 4}
		m, err := New(cfg, Snapshot{})
		if err != nil {
			t.Fatal(err)
		}
		undosSinceCommit := map[uint64]bool{}
		for len(data) >= 3 {
			op, a, b := data[0], data[1], data[2]
			data = data[3:]
			switch op % 8 {
			case 0, 1, 2: // deliver the server's next message
				if len(srv.queue) == 0 && !srv.startMicrobatch(rand.New(rand.NewPCG(uint64(a), uint64(b)))) {
					chain.mine()
					continue
				}
				msg := srv.queue[0]
				srv.queue = srv.queue[1:]
				if rc := fuzzApply(t, m, []BlockRange{msg.r}, msg.complete, len(msg.rows), undosSinceCommit, stats); rc != nil {
					srv.connect(rc.Cursor)
				}
			case 3: // reorg
				depth := 1 + uint64(a)%uint64(len(chain.canon))
				chain.reorg(depth)
				for range b % 3 {
					chain.mine()
				}
			case 4: // an arbitrary range
				var r BlockRange
				r.Network = []string{"eth", "eth", "eth", "pol", ""}[a%5]
				prev := m.Previous()
				base := uint64(0)
				if len(prev) > 0 {
					base = prev[0].End
				}
				r.Start = base + uint64(a>>3) - 8
				if a>>3 < 8 && base < uint64(8-a>>3) {
					r.Start = 0
				}
				r.End = r.Start + uint64(b%5)
				binary.BigEndian.PutUint64(r.Hash[:8], uint64(b))
				r.HasPrevHash = b&0x80 == 0
				if len(prev) > 0 && b&0x40 == 0 {
					r.PrevHash = prev[0].Hash
				} else {
					binary.BigEndian.PutUint64(r.PrevHash[:8], uint64(a))
				}
				// The range did not come from srv, so a reconnect request has
				// no stream to restart; fuzzApply has checked its invariants.
				_ = fuzzApply(t, m, []BlockRange{r}, b&1 == 0, int(a%3), undosSinceCommit, stats)
			case 5: // commit
				if m.Next() == 0 {
					continue
				}
				seq := uint64(a) % m.Next()
				before := m.Snapshot()
				if err := m.Commit(seq); err != nil {
					t.Fatalf("committing %d below next %d: %v", seq, m.Next(), err)
				}
				after := m.Snapshot()
				checkCommitted(t, before, after, undosSinceCommit)
				for s := range undosSinceCommit {
					if s <= seq {
						delete(undosSinceCommit, s)
					}
				}
			case 6: // rollback
				before := m.Snapshot()
				m.Rollback()
				clear(undosSinceCommit)
				srv.connect(m.Snapshot().Cursor())
				if after := m.Snapshot(); after.Next != before.Next || len(after.Watermarks) != len(before.Watermarks) {
					t.Fatalf("rollback changed the committed snapshot: %+v -> %+v", before, after)
				}
			case 7: // restart from the snapshot, Next persisted per event or at commit
				snap := m.Snapshot()
				if a&1 == 1 {
					snap.Next = m.Next()
				}
				nm, err := New(cfg, snap)
				if err != nil {
					t.Fatalf("restarting from the machine's own snapshot: %v", err)
				}
				m = nm
				clear(undosSinceCommit)
				srv.connect(snap.Cursor())
			}
			if err := m.Snapshot().Validate(); err != nil {
				t.Fatalf("snapshot does not validate: %v", err)
			}
		}
	}
}

// fuzzApply applies one envelope and checks the per-event invariants.
func fuzzApply(t *testing.T, m *Machine, in []BlockRange, complete bool, rows int, undos map[uint64]bool,
	stats map[string]int) *ReconnectError {
	t.Helper()
	prev, snap, next := m.Previous(), m.Snapshot(), m.Next()
	evs, err := m.Apply(in, complete, rows)
	var rc *ReconnectError
	var ve *ValidationError
	var ue *UnrecoverableError
	if stats != nil {
		switch {
		case errors.As(err, &rc):
			stats["reconnect"]++
		case errors.As(err, &ve):
			stats[ve.Kind.String()]++
		case errors.As(err, &ue):
			stats["unrecoverable"]++
		}
		for _, ev := range evs {
			if ev.Kind == KindUndo {
				stats["undo-"+ev.Cause.String()]++
			}
		}
	}
	switch {
	case err == nil:
	case errors.As(err, &rc):
	case errors.As(err, &ve), errors.As(err, &ue):
		if len(evs) != 0 || m.Next() != next || !sameRanges(m.Previous(), prev) || m.Snapshot().Next != snap.Next {
			t.Fatalf("error %v changed the state", err)
		}
		return nil
	default:
		t.Fatalf("unexpected error type %T: %v", err, err)
	}
	for i, ev := range evs {
		rewindFirst := ev.Kind == KindUndo && ev.Cause == CauseRewind && i == 0
		if ev.Seq != next+uint64(i) && !rewindFirst {
			t.Fatalf("event %d %v: want seq %d", i, ev, next+uint64(i))
		}
		if ev.Kind != KindUndo {
			continue
		}
		undos[ev.Seq] = true
		if ev.First > ev.Last || ev.Last >= ev.Seq {
			t.Fatalf("%v: bad invalidated range", ev)
		}
		for _, w := range ev.Retract {
			if w.Seq < ev.First || w.Seq > ev.Last || w.Seq >= snap.Next {
				t.Fatalf("%v retracts watermark %d that is not committed or not invalidated", ev, w.Seq)
			}
		}
		if ev.Cause != CauseReorg {
			continue
		}
		for _, r := range in {
			p, ok := rangeOf(prev, r.Network)
			if !ok || r.Same(p) || r.Start > p.End {
				continue
			}
			covered := false
			for _, inv := range ev.Invalidations {
				covered = covered || (inv.Network == r.Network && inv.Start <= r.Start && inv.End >= max(r.End, p.End))
			}
			if !covered {
				t.Fatalf("%v does not cover %s overlapping %s", ev, r, p)
			}
		}
	}
	return rc
}

// checkCommitted: the committed Next never decreases and the newest
// committed watermark never goes backwards unless an Undo was committed.
func checkCommitted(t *testing.T, before, after Snapshot, undos map[uint64]bool) {
	t.Helper()
	if after.Next < before.Next {
		t.Fatalf("committed next went back from %d to %d", before.Next, after.Next)
	}
	if len(before.Watermarks) == 0 {
		return
	}
	committedUndo := false
	for s := range undos {
		committedUndo = committedUndo || (s >= before.Next && s < after.Next)
	}
	if committedUndo {
		return
	}
	old := before.Watermarks[len(before.Watermarks)-1]
	if len(after.Watermarks) == 0 || after.Watermarks[len(after.Watermarks)-1].Seq < old.Seq {
		t.Fatalf("committed watermark went back from seq %d without an Undo: %+v", old.Seq, after.Watermarks)
	}
}

// TestFuzzSeedsReachOutcomes checks that each seed of
// testdata/fuzz/FuzzMachine reaches the outcome its file is named after.
func TestFuzzSeedsReachOutcomes(t *testing.T) {
	outcomes := map[string]string{
		"gap": "Gap", "invalid-reorg": "InvalidReorg", "reconnect-partial-reorg": "reconnect",
		"rewind": "undo-rewind", "unrecoverable": "unrecoverable",
	}
	for name, outcome := range outcomes {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzMachine", name))
			require.NoError(t, err)
			_, lit, ok := strings.Cut(strings.TrimSpace(string(b)), "[]byte(")
			require.True(t, ok)
			data, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
			require.NoError(t, err)
			stats := map[string]int{}
			fuzzMachine(t, []byte(data), stats)
			assert.Positive(t, stats[outcome], "outcomes met: %v", stats)
		})
	}
}
