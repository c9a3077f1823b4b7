package offsets

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// ControlRecord is one committed record of the control topic.
type ControlRecord struct {
	// Offset is the record's offset in the control topic's one partition.
	Offset int64
	// Key is the stream id; Value the encoded event (nil: a tombstone).
	Key, Value []byte
}

// ControlBounds is the extent of the control topic's partition when read.
type ControlBounds struct {
	// Start is the log start offset: retention deleted what was below it.
	Start int64
	// End is the last stable offset: the offset after the newest committed
	// record, and where the next event will be written.
	End int64
}

// ControlLog reads the control topic's committed records (read_committed)
// by offset range. The run loop adapts the sink's reader to it, so this
// package needs no Kafka client.
type ControlLog interface {
	// Bounds returns the log start offset and the last stable offset, after
	// every transaction open at the call has ended.
	Bounds(ctx context.Context) (ControlBounds, error)
	// Scan hands the committed records at offsets from <= offset < until to
	// fn in offset order, a chunk at a time, keeping none; fn must not keep
	// the slice. An error of fn ends the scan and is returned as is.
	Scan(ctx context.Context, from, until int64, fn func([]ControlRecord) error) error
}

// HistoryEvent is one of a stream's committed control events.
type HistoryEvent struct {
	// Offset is the event's offset in the control topic.
	Offset int64
	// Event is the decoded event.
	Event ControlEvent
}

// DefaultSearchWindow is the number of control-topic offsets the backwards
// search for a stream's newest event reads first (Control.Newest); each
// further step back reads twice as many.
const DefaultSearchWindow int64 = 512

// Control is the control topic as Kafka's record of a stream's committed
// offsets: it reads a stream's events through a ControlLog, decodes them
// and rebuilds the stream's state from them. It implements ControlReader.
//
// The control topic is shared by the streams of a deployment, so a
// stream's events are interleaved with the others'. Control never reads
// the whole topic to find a stream's state: Newest searches backwards from
// the end in windows that double, and every live watermark names the
// offset of the stream's newest full checkpoint copy (StreamState's
// BaseOffset), so NewestState reads from there to the watermark and no
// further. What it reads is bounded by the distance to the stream's newest
// watermark and by the writer's full-copy interval, not by the length of
// the history; what it holds is one chunk of records and the stream's
// watermarks since the full copy.
type Control struct {
	log    ControlLog
	codec  *ControlCodec
	topic  string
	window int64
}

var _ ControlReader = (*Control)(nil)

// NewControl returns the control topic named topic (for messages) read
// through log, with the DefaultSearchWindow.
func NewControl(log ControlLog, codec *ControlCodec, topic string) *Control {
	return &Control{log: log, codec: codec, topic: topic, window: DefaultSearchWindow}
}

// SetSearchWindow sets the number of offsets the backwards search reads
// first (at least 1; DefaultSearchWindow when n < 1).
func (c *Control) SetSearchWindow(n int64) {
	if n < 1 {
		n = DefaultSearchWindow
	}
	c.window = n
}

// Topic returns the control topic's name.
func (c *Control) Topic() string { return c.topic }

// Bounds returns the control topic's log start and last stable offset.
func (c *Control) Bounds(ctx context.Context) (ControlBounds, error) {
	b, err := c.log.Bounds(ctx)
	if err != nil {
		return b, fmt.Errorf("reading the bounds of control topic %s: %w", c.topic, err)
	}
	return b, nil
}

// Scan decodes the stream's committed control events at offsets
// from <= offset < until and hands them to fn one at a time, oldest first,
// keeping none: its memory does not depend on the range. Other streams'
// records are skipped without being decoded. An error of fn ends the scan
// and is returned as is.
func (c *Control) Scan(ctx context.Context, stream string, from, until int64, fn func(HistoryEvent) error) error {
	var fnErr error
	err := c.log.Scan(ctx, from, until, func(recs []ControlRecord) error {
		for _, rec := range recs {
			ev, ok, err := c.decode(stream, rec)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if err := fn(ev); err != nil {
				fnErr = err
				return err
			}
		}
		return nil
	})
	switch {
	case err == nil:
		return nil
	case fnErr != nil && errors.Is(err, fnErr):
		return fnErr
	default:
		return fmt.Errorf("reading control topic %s[%d..%d): %w", c.topic, from, until, err)
	}
}

// decode decodes rec when it is an event of stream.
func (c *Control) decode(stream string, rec ControlRecord) (HistoryEvent, bool, error) {
	if string(rec.Key) != stream || rec.Value == nil {
		return HistoryEvent{}, false, nil
	}
	ev, err := c.codec.Decode(rec.Value)
	if err != nil {
		return HistoryEvent{}, false, fmt.Errorf("decoding control event at %s@%d: %w", c.topic, rec.Offset, err)
	}
	if (ev.Watermark != nil && ev.Watermark.Stream != stream) || (ev.Undo != nil && ev.Undo.Stream != stream) {
		return HistoryEvent{}, false, nil
	}
	return HistoryEvent{Offset: rec.Offset, Event: ev}, true, nil
}

// Newest returns the stream's newest committed control event at or after
// offset from (the log start when from is NoOffset) for which match is
// true, or nil when there is none, with the bounds it searched. It searches
// backwards from the end: it reads the last SearchWindow offsets, then the
// twice as many before them, and so on, and stops at the first window that
// holds a match. A stream that commits often is found in the first window;
// the reads grow with the logarithm of the distance back to the stream's
// newest event (the other streams' events written since), never with the
// stream's history.
func (c *Control) Newest(ctx context.Context, stream string, from int64, match func(HistoryEvent) bool) (*HistoryEvent, ControlBounds, error) {
	b, err := c.Bounds(ctx)
	if err != nil {
		return nil, b, err
	}
	lo := max(from, b.Start)
	var found *HistoryEvent
	for until, w := b.End, c.window; until > lo; until, w = max(lo, until-w), 2*w {
		start := max(lo, until-w)
		err := c.Scan(ctx, stream, start, until, func(h HistoryEvent) error {
			if match(h) {
				found = &h
			}
			return nil
		})
		if err != nil {
			return nil, b, err
		}
		if found != nil {
			return found, b, nil
		}
	}
	return nil, b, nil
}

// NewestState returns the stream's state after its newest committed live
// watermark at or after offset from: the checkpoint that event carries, or,
// for an event that carries only its state, the checkpoint of the event at
// its base offset rolled forward through the watermarks since
// (RollForward). Backfill watermarks are not the live stream's. It finds
// the watermark with Newest and then reads from its base offset to it: a
// bounded number of reads whatever the history's length. When retention
// deleted the base offset the error matches ErrControlTruncated.
func (c *Control) NewestState(ctx context.Context, stream string, from int64) (*ControlState, error) {
	h, b, err := c.Newest(ctx, stream, from, func(h HistoryEvent) bool { return IsLiveState(h.Event.Watermark) })
	if err != nil || h == nil {
		return nil, err
	}
	w := h.Event.Watermark
	if len(w.Checkpoint) > 0 {
		st, err := ControlStateOf(w.Checkpoint, h.Offset)
		if err != nil {
			return nil, fmt.Errorf("control topic %s: %w", c.topic, err)
		}
		return st, nil
	}
	base := w.State.BaseOffset
	if base < b.Start {
		return nil, fmt.Errorf("control topic %s: the newest watermark of stream %q (offset %d) is rebuilt from the stream's full "+
			"checkpoint copy at offset %d, but the topic now starts at offset %d: its retention (retention.ms, retention.bytes) or "+
			"DeleteRecords deleted the copy: %w. Give the control topic infinite retention (retention.ms=-1, the default the bridge "+
			"creates it with); to recover, restore the checkpoint store (the stream resumes from its offset) or start over under a "+
			"new stream id", c.topic, stream, h.Offset, base, b.Start, ErrControlTruncated)
	}
	if base > h.Offset {
		return nil, fmt.Errorf("control topic %s: the watermark at offset %d refers to the checkpoint at the later offset %d: %w",
			c.topic, h.Offset, base, ErrMalformedEvent)
	}
	// Only the live watermarks from the base to h: what StateAt uses.
	var hist []HistoryEvent
	err = c.Scan(ctx, stream, base, h.Offset+1, func(e HistoryEvent) error {
		if IsLiveState(e.Event.Watermark) {
			hist = append(hist, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(hist) == 0 || hist[len(hist)-1].Offset != h.Offset {
		// Not ErrControlTruncated: a read that races a deletion may
		// find the stream's state on the next start.
		return nil, fmt.Errorf("control topic %s: the stream's watermark at offset %d vanished between two reads (were records deleted?)",
			c.topic, h.Offset)
	}
	st, err := StateAt(hist, len(hist)-1)
	if errors.Is(err, ErrRollForward) {
		return nil, fmt.Errorf("control topic %s, stream %q: %w. The committed events are what they are, so a restart finds the same: "+
			"restore the control topic if it can be restored, or start over under a new stream id with new topics", c.topic, stream, err)
	}
	if err != nil {
		return nil, fmt.Errorf("control topic %s: %w", c.topic, err)
	}
	return &st, nil
}

// IsLiveState reports whether w is a live watermark that carries a
// checkpoint or a state (not a backfill's).
func IsLiveState(w *Watermark) bool {
	return w != nil && w.Backfill == nil && (len(w.Checkpoint) > 0 || w.State != nil)
}

// LastLiveWatermark returns the index of the newest live watermark of hist
// that carries a checkpoint or a state, or -1.
func LastLiveWatermark(hist []HistoryEvent) int {
	for i := len(hist) - 1; i >= 0; i-- {
		if IsLiveState(hist[i].Event.Watermark) {
			return i
		}
	}
	return -1
}

// StateAt returns the stream's state after the live watermark hist[i]: its
// checkpoint, or the checkpoint of the event at its base offset rolled
// forward through the live watermarks up to it.
func StateAt(hist []HistoryEvent, i int) (ControlState, error) {
	w := hist[i].Event.Watermark
	if len(w.Checkpoint) > 0 {
		st, err := ControlStateOf(w.Checkpoint, hist[i].Offset)
		if err != nil {
			return ControlState{}, err
		}
		return *st, nil
	}
	b := slices.IndexFunc(hist[:i], func(h HistoryEvent) bool { return h.Offset == w.State.BaseOffset })
	if b < 0 || hist[b].Event.Watermark == nil || len(hist[b].Event.Watermark.Checkpoint) == 0 {
		return ControlState{}, fmt.Errorf("the watermark at offset %d refers to the checkpoint at offset %d, "+
			"which is not a committed watermark of the stream with a checkpoint: the control topic was truncated or rewritten: %w",
			hist[i].Offset, w.State.BaseOffset, ErrControlTruncated)
	}
	base, err := ControlStateOf(hist[b].Event.Watermark.Checkpoint, hist[b].Offset)
	if err != nil {
		return ControlState{}, err
	}
	var deltas []Delta
	for _, h := range hist[b+1 : i+1] {
		d := h.Event.Watermark
		if d == nil || d.Backfill != nil || d.State == nil {
			continue
		}
		delta := Delta{Offset: h.Offset, Retained: d.State.Retained, Next: d.State.Next, Incomplete: d.State.Incomplete}
		for _, cb := range d.Batches {
			delta.Batches = append(delta.Batches, cb.Batch())
		}
		deltas = append(deltas, delta)
	}
	return RollForward(*base, deltas)
}
