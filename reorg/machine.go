package reorg

import (
	"fmt"
	"slices"
)

// DefaultRetention is the default [Config.Retention] in blocks, the value of
// Amp's own ampsync.
const DefaultRetention = 128

// MaxRetention is the largest accepted [Config.Retention]. Every retained
// microbatch is stored in the checkpoint, so retention stays near the
// deepest expected reorg.
const MaxRetention = 1_000_000

// Config configures a [Machine].
type Config struct {
	// Retention is how far back, in blocks, completed microbatches are kept
	// for reorg recovery: a reorg whose fork point is at most Retention
	// blocks before the start of the newest watermark is always
	// recoverable. Of the watermarks all of whose ranges end before that
	// cutoff, the newest is kept (the recovery point) and the older ones
	// are pruned (amp-protocol.md §5.2, without the Rust client's gap of
	// pruning the recovery point too). A reorg whose fork point lies below
	// the oldest retained watermark is unrecoverable ([ErrUnrecoverable]).
	// Default [DefaultRetention] (128); zero keeps the newest watermark and
	// the one before it, so start from [DefaultConfig].
	Retention uint64
}

// DefaultConfig returns the default configuration (retention 128 blocks).
func DefaultConfig() Config { return Config{Retention: DefaultRetention} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Retention > MaxRetention {
		return fmt.Errorf("reorg: retention %d blocks is above the maximum %d; every retained microbatch is stored "+
			"in the checkpoint, so set it near the deepest reorg you expect (default %d)",
			c.Retention, MaxRetention, DefaultRetention)
	}
	return nil
}

type opKind uint8

const (
	opInsert   opKind = iota + 1 // append wm
	opPrune                      // drop watermarks with Seq <= bound
	opTruncate                   // drop watermarks with Seq > bound (all when all)
)

// op is a change to the retained watermarks made by the event seq; it
// reaches the committed snapshot when seq is committed.
type op struct {
	seq   uint64
	kind  opKind
	wm    Watermark
	bound uint64
	all   bool
}

// Machine is the transactional reorg state machine. It is not safe for
// concurrent use; its state is fully determined by its Config, the Snapshot
// it was created from and the calls made on it.
type Machine struct {
	cfg Config

	committed Snapshot // state as of the last Commit; its Watermarks array is owned (Snapshot clones)
	ops       []op     // changes by uncommitted events, in order

	next       uint64
	buf        []Watermark // retained watermarks, committed or not, oldest first
	incomplete bool
	handover   Cursor       // the snapshot's hand-over cursor, checked while prev is empty
	start      bool         // handover is a start position: nothing before it was published
	prev       []BlockRange // ranges of the last accepted envelope
	completed  bool         // prev are the ranges of the newest watermark in buf
	started    bool

	prevID  string // BatchID(prev), computed lazily
	hasID   bool
	replays uint64
}

// New returns a machine resuming from snap, which is usually the last
// committed Snapshot loaded from the checkpoint (the zero Snapshot for a
// fresh stream). The source connects with snap.Cursor().
func New(cfg Config, snap Snapshot) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := snap.Validate(); err != nil {
		return nil, err
	}
	m := &Machine{cfg: cfg}
	m.reset(snap.clone())
	return m, nil
}

// reset makes snap the committed and the working state.
func (m *Machine) reset(snap Snapshot) {
	m.committed = snap
	m.ops = m.ops[:0]
	m.next = snap.Next
	m.buf = append(m.buf[:0], snap.Watermarks...)
	m.incomplete = snap.Incomplete
	m.handover = snap.Handover
	m.start = snap.Start
	m.prev, m.completed = nil, false
	if n := len(m.buf); n > 0 {
		m.prev, m.completed = m.buf[n-1].Ranges, true
	}
	m.hasID = false
	m.started = false
}

// Start returns the events that precede the stream: an Undo with
// CauseRewind when the snapshot's Next is beyond the event after its last
// watermark (events were emitted after the last committed watermark before
// a crash or a Rollback), else nothing. [Machine.Apply] calls it implicitly
// on its first call; calling it again returns nothing.
func (m *Machine) Start() []Event {
	if m.started {
		return nil
	}
	m.started = true
	var first uint64
	if n := len(m.buf); n > 0 {
		first = m.buf[n-1].Seq + 1
	}
	if m.next <= first {
		return nil
	}
	ev := Event{Kind: KindUndo, Seq: m.next, Cause: CauseRewind, First: first, Last: m.next - 1}
	m.next++
	return []Event{ev}
}

// Apply feeds one envelope of the stream: the batch's ranges, whether they
// are complete (ranges_complete) and its row count. It returns the events
// to handle, in order:
//
//   - an envelope that breaks a protocol rule returns a [*ValidationError]
//     and changes nothing;
//   - a reorg (amp-protocol.md §5.1 step 4) first emits an Undo with
//     CauseReorg, or returns an [*UnrecoverableError] (state unchanged) when
//     its fork point is below every retained watermark;
//   - when the fork point lies inside an already completed microbatch, the
//     Undo is returned with a [*ReconnectError] and the envelope itself is
//     dropped: handle the events, then reconnect with the error's cursor;
//   - rows > 0 emit a Data event; a keep-alive (no rows, not complete)
//     emits nothing;
//   - complete emits a Watermark after the Data (a completion batch with
//     rows, which the real server never sends, is not lost);
//   - an envelope whose ranges equal the newest watermark's, after that
//     watermark (a replay, amp-protocol.md §8.6 F4), emits nothing: its rows
//     were already delivered;
//   - empty ranges (a query with no synced table) emit Data for rows and
//     never a Watermark: there is no position to resume from.
//
// The ranges are copied; the caller may reuse the slice.
func (m *Machine) Apply(ranges []BlockRange, complete bool, rows int) ([]Event, error) {
	if rows < 0 {
		return nil, fmt.Errorf("reorg: applying a batch of %s: negative row count %d", rangesString(ranges), rows)
	}
	if err := Validate(m.prev, ranges); err != nil {
		return nil, err
	}
	if len(m.prev) == 0 && len(m.handover) > 0 && len(ranges) > 0 {
		if err := checkHandover(m.handover, ranges); err != nil {
			return nil, err
		}
	}
	same := sameRanges(ranges, m.prev)
	if same && m.completed {
		m.replays++
		return m.Start(), nil
	}
	invs := Detect(m.prev, ranges)
	var rec recovery
	if len(invs) > 0 {
		var err error
		if rec, err = m.findRecovery(ranges, invs); err != nil {
			return nil, err
		}
	}

	events := m.Start()
	if len(invs) > 0 {
		events = m.undo(events, rec, invs)
		if rec.reconnect {
			rc := &ReconnectError{Invalidations: invs}
			if rec.index >= 0 {
				rc.Cursor, rc.Seq = CursorFromRanges(m.buf[rec.index].Ranges), m.buf[rec.index].Seq
			} else if len(m.handover) > 0 {
				rc.Cursor = m.handover.clone() // resume at the hand-over block
			}
			m.truncate(rec)
			return events, rc
		}
		m.truncate(rec)
	}
	if !same {
		m.prev, m.completed, m.hasID = slices.Clone(ranges), false, false
	}
	if rows > 0 {
		events = append(events, Event{Kind: KindData, Seq: m.next, Ranges: m.prev, BatchID: m.batchID(), Rows: rows})
		m.next++
	}
	if complete && len(m.prev) > 0 {
		events = append(events, m.watermark())
	}
	return events, nil
}

// handoverRecovery recovers a reorg after a backfill's hand-over: when
// every invalidated block is at or after the hand-over block and the
// retained watermarks still reach back to it (nothing pruned yet),
// everything is undone and the stream resumes at the hand-over block,
// without reconnecting when the incoming ranges start there. After a start
// position (Snapshot.Start) the invalidated blocks may also reach below
// the start block, which was never published: everything is undone and the
// stream reconnects at the start block.
func (m *Machine) handoverRecovery(incoming []BlockRange, invs []Invalidation) (recovery, bool) {
	if len(m.handover) == 0 {
		return recovery{}, false
	}
	for _, inv := range invs {
		if p, ok := m.handover[inv.Network]; !ok || inv.Start < p.Number && !m.start {
			return recovery{}, false
		}
	}
	if len(m.buf) > 0 {
		for _, r := range m.buf[0].Ranges {
			if p, ok := m.handover[r.Network]; !ok || r.Start != p.Number {
				return recovery{}, false
			}
		}
	}
	rec := recovery{index: -1}
	for _, r := range incoming {
		if p, ok := m.handover[r.Network]; !ok || r.Start != p.Number {
			rec.reconnect = true
		}
	}
	return rec, true
}

// checkHandover checks the first ranges after a backfill: one per network
// of the hand-over cursor, each starting at the cursor's block.
func checkHandover(h Cursor, ranges []BlockRange) error {
	if len(ranges) != len(h) {
		return &ValidationError{Kind: HandoverMismatch, PreviousNetworks: h.Networks(), IncomingNetworks: networks(ranges)}
	}
	for _, r := range ranges {
		p, ok := h[r.Network]
		if !ok {
			return &ValidationError{Kind: HandoverMismatch, PreviousNetworks: h.Networks(), IncomingNetworks: networks(ranges)}
		}
		if r.Start != p.Number {
			return &ValidationError{Kind: HandoverMismatch, Network: r.Network, Incoming: r,
				Previous: BlockRange{Network: r.Network, Start: p.Number, End: p.Number}}
		}
	}
	return nil
}

// recovery is the outcome of the recovery lookup of a reorg.
type recovery struct {
	index     int // index in buf of the recovery watermark, -1 for none
	reconnect bool
}

// findRecovery picks the newest retained watermark all of whose ranges of
// the invalidated networks end before the fork point, and decides whether
// the stream must reconnect: it may continue only when every incoming range
// starts right after the recovery watermark (else blocks between the two
// were invalidated and would never be re-sent: the Rust client's Partial
// case).
func (m *Machine) findRecovery(incoming []BlockRange, invs []Invalidation) (recovery, error) {
	for i := len(m.buf) - 1; i >= 0; i-- {
		if !endsBefore(m.buf[i].Ranges, invs) {
			continue
		}
		rec := recovery{index: i}
		for _, r := range incoming {
			p, ok := rangeOf(m.buf[i].Ranges, r.Network)
			if !ok || r.Start != p.End+1 {
				rec.reconnect = true
			}
		}
		return rec, nil
	}
	if m.incomplete {
		if rec, ok := m.handoverRecovery(incoming, invs); ok {
			return rec, nil
		}
		e := &UnrecoverableError{Invalidations: invs, Retention: m.cfg.Retention}
		if len(m.buf) > 0 {
			e.Oldest = m.buf[0]
		}
		return recovery{}, e
	}
	// The whole history is retained: undo everything; continue only when
	// the incoming ranges start at or before the stream's first block.
	origin := m.prev
	if len(m.buf) > 0 {
		origin = m.buf[0].Ranges
	}
	rec := recovery{index: -1}
	for _, r := range incoming {
		o, ok := rangeOf(origin, r.Network)
		if !ok || r.Start > o.Start {
			rec.reconnect = true
		}
	}
	return rec, nil
}

// endsBefore reports whether every range of ranges on an invalidated
// network ends before that network's fork point.
func endsBefore(ranges []BlockRange, invs []Invalidation) bool {
	for _, inv := range invs {
		if r, ok := rangeOf(ranges, inv.Network); ok && r.End >= inv.Start {
			return false
		}
	}
	return true
}

// undo appends the Undo of a reorg with recovery rec, if it invalidates any
// event.
func (m *Machine) undo(events []Event, rec recovery, invs []Invalidation) []Event {
	var first uint64
	if rec.index >= 0 {
		first = m.buf[rec.index].Seq + 1
	}
	if first >= m.next {
		return events
	}
	ev := Event{Kind: KindUndo, Seq: m.next, Cause: CauseReorg, Invalidations: invs, First: first, Last: m.next - 1}
	// Retract comes from the committed state, not the working buffer: when
	// the Undo aborts the open transaction, the retractions of an earlier
	// Undo in it are lost too, and must be written again.
	for _, w := range m.committed.Watermarks {
		if w.Seq >= first {
			ev.Retract = append(ev.Retract, w)
		}
	}
	ev.Abort = ev.Last >= m.committed.Next
	ev.Replay = ev.Abort && first > m.committed.Next
	m.ops = append(m.ops, op{seq: ev.Seq, kind: opTruncate, bound: first - 1, all: rec.index < 0})
	m.next++
	return append(events, ev)
}

// truncate drops the watermarks after the recovery and, when reconnecting,
// makes the recovery's ranges the previous ones.
func (m *Machine) truncate(rec recovery) {
	clear(m.buf[rec.index+1:])
	m.buf = m.buf[:rec.index+1]
	if !rec.reconnect {
		return
	}
	m.prev, m.completed, m.hasID = nil, false, false
	if rec.index >= 0 {
		m.prev, m.completed = m.buf[rec.index].Ranges, true
	}
}

// watermark emits the Watermark of the current ranges, buffers it and
// prunes the buffer.
func (m *Machine) watermark() Event {
	w := Watermark{Seq: m.next, Ranges: m.prev}
	m.next++
	m.buf = append(m.buf, w)
	m.ops = append(m.ops, op{seq: w.Seq, kind: opInsert, wm: w})
	m.completed = true
	ev := Event{Kind: KindWatermark, Seq: w.Seq, Ranges: w.Ranges, BatchID: m.batchID()}
	if n := m.pruneCount(); n > 0 {
		ev.Prune, ev.HasPrune = m.buf[n-1].Seq, true
		clear(m.buf[:n])
		m.buf = slices.Delete(m.buf, 0, n)
		m.incomplete = true
		m.ops = append(m.ops, op{seq: w.Seq, kind: opPrune, bound: ev.Prune})
	}
	return ev
}

// pruneCount returns how many of the oldest buffered watermarks are outside
// retention. A watermark is beyond retention when every one of its ranges
// ends before the newest watermark's start minus retention (saturating);
// walking from the oldest, excluding the newest, the leading run of such
// watermarks is counted, and the newest of them is kept: it is the recovery
// point of a reorg whose fork point is at or after that cutoff. Without it,
// one microbatch that spans nearly the whole window (a catch-up after an
// outage) would make a reorg of its last blocks unrecoverable, as its start
// lies below the cutoff while the fork point does not. amp-protocol.md §5.2
// (the Rust client) prunes that watermark too, and notes the gap.
func (m *Machine) pruneCount() int {
	latest := m.buf[len(m.buf)-1].Ranges
	n := 0
	for _, w := range m.buf[:len(m.buf)-1] {
		for _, r := range w.Ranges {
			l, ok := rangeOf(latest, r.Network)
			if !ok || l.Start < m.cfg.Retention || r.End >= l.Start-m.cfg.Retention {
				return max(n-1, 0)
			}
		}
		n++
	}
	return max(n-1, 0)
}

func (m *Machine) batchID() string {
	if !m.hasID {
		m.prevID, m.hasID = BatchID(m.prev), true
	}
	return m.prevID
}

// Commit records that every event with a sequence number up to seq is
// durable downstream (the Kafka transaction holding them committed): the
// watermarks, prunes and truncations of those events move into the
// committed [Snapshot]. Committing an already committed seq does nothing;
// committing a seq that was never emitted is an error. The bridge commits
// at Watermark events; any seq may be committed (Rust commit handles).
func (m *Machine) Commit(seq uint64) error {
	if seq >= m.next {
		return fmt.Errorf("reorg: committing seq %d, but only seqs below %d were emitted", seq, m.next)
	}
	if seq < m.committed.Next {
		return nil
	}
	n := 0
	for ; n < len(m.ops) && m.ops[n].seq <= seq; n++ {
		o := m.ops[n]
		ws := m.committed.Watermarks
		switch o.kind {
		case opInsert:
			ws = append(ws, o.wm)
		case opPrune:
			k := 0
			for k < len(ws) && ws[k].Seq <= o.bound {
				k++
			}
			if k > 0 {
				n := copy(ws, ws[k:])
				clear(ws[n:])
				ws = ws[:n]
				m.committed.Incomplete = true
			}
		case opTruncate:
			k := len(ws)
			for k > 0 && (o.all || ws[k-1].Seq > o.bound) {
				k--
			}
			clear(ws[k:])
			ws = ws[:k]
		}
		m.committed.Watermarks = ws
	}
	m.ops = append(m.ops[:0], m.ops[n:]...)
	m.committed.Next = seq + 1
	return nil
}

// Snapshot returns the committed state, to persist after a Commit. Its
// Cursor is where the source resumes after a restart or a Rollback. The
// returned value shares no mutable memory with the machine.
func (m *Machine) Snapshot() Snapshot { return m.committed.clone() }

// Rollback forgets everything not committed, as if the process had
// restarted from Snapshot(): the caller aborted its open transaction and
// reconnects the source with Snapshot().Cursor(). The previous ranges
// become the newest committed watermark's. Sequence numbers above the
// committed Next are allocated again; events that held them were never
// visible downstream. If the committed Next is beyond the last committed
// watermark (a seq other than a watermark was committed), the next Apply
// starts with an Undo(Rewind) as after a restart.
func (m *Machine) Rollback() { m.reset(m.committed.clone()) }

// Previous returns the ranges the next envelope is validated against: the
// last accepted envelope's, or after a restart, Rollback or reconnect the
// resume watermark's (nil on a fresh stream).
func (m *Machine) Previous() []BlockRange { return slices.Clone(m.prev) }

// Next returns the next sequence number to allocate. The bridge persists
// Next only with a commit (Snapshot().Next): uncommitted events are
// invisible in Kafka, so reusing their numbers is harmless. A consumer
// without transactions persists Next() after every event instead, as the
// Rust client does, and restores Snapshot{Next: persisted, Watermarks: …}:
// Start then emits the Undo(Rewind) of amp-protocol.md §5.2.
func (m *Machine) Next() uint64 { return m.next }

// Replays returns how many envelopes were dropped because their ranges
// equal the newest watermark's (a replayed microbatch).
func (m *Machine) Replays() uint64 { return m.replays }

// Retained returns the retained watermarks, committed or not, oldest first.
func (m *Machine) Retained() []Watermark { return slices.Clone(m.buf) }
