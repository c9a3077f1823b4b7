package offsets

import (
	"context"
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

// ControlPage is what one read of the control topic returned.
type ControlPage struct {
	// Records are the committed records from max(from, Start) up to End,
	// in offset order.
	Records []ControlRecord
	// Start is the log start offset when read; End the last stable offset
	// the read went up to.
	Start, End int64
	// Truncated is true when the read began below Start: retention removed
	// events the caller asked for.
	Truncated bool
}

// ControlLog reads the control topic's committed records (read_committed).
// The run loop adapts the sink's reader to it, so this package needs no
// Kafka client.
type ControlLog interface {
	// ReadControl returns the committed records at offsets at or after
	// from (the start of the log when from is NoOffset) up to the end.
	ReadControl(ctx context.Context, from int64) (ControlPage, error)
}

// HistoryEvent is one of a stream's committed control events.
type HistoryEvent struct {
	// Offset is the event's offset in the control topic.
	Offset int64
	// Event is the decoded event.
	Event ControlEvent
}

// Control is the control topic as Kafka's record of a stream's committed
// offsets: it reads a stream's events through a ControlLog, decodes them
// and rebuilds the stream's state from them. It implements ControlReader.
type Control struct {
	log   ControlLog
	codec *ControlCodec
	topic string
}

var _ ControlReader = (*Control)(nil)

// NewControl returns the control topic named topic (for messages) read
// through log.
func NewControl(log ControlLog, codec *ControlCodec, topic string) *Control {
	return &Control{log: log, codec: codec, topic: topic}
}

// Topic returns the control topic's name.
func (c *Control) Topic() string { return c.topic }

// NewestState returns the stream's state after its newest committed live
// watermark at or after offset from: the checkpoint that event carries, or,
// for an event that carries only its state, the checkpoint of the event at
// its base offset rolled forward through the watermarks since
// (RollForward). Backfill watermarks are not the live stream's.
func (c *Control) NewestState(ctx context.Context, stream string, from int64) (*ControlState, error) {
	start := from
	if start == NoOffset {
		start = 0
	}
	hist, _, err := c.History(ctx, stream, start)
	if err != nil {
		return nil, err
	}
	for i := len(hist) - 1; i >= 0; i-- {
		w := hist[i].Event.Watermark
		if w == nil || w.Backfill != nil || (len(w.Checkpoint) == 0 && w.State == nil) {
			continue
		}
		if len(w.Checkpoint) == 0 && w.State.BaseOffset < start {
			// The checkpoint is older than from: read from there.
			if hist, _, err = c.History(ctx, stream, w.State.BaseOffset); err != nil {
				return nil, err
			}
			if i = LastLiveWatermark(hist); i < 0 {
				return nil, fmt.Errorf("control topic %s: the stream's events vanished between two reads", c.topic)
			}
		}
		st, err := StateAt(hist, i)
		if err != nil {
			return nil, fmt.Errorf("control topic %s: %w", c.topic, err)
		}
		return &st, nil
	}
	return nil, nil
}

// History returns the stream's committed control events at offsets at or
// after from, oldest first, and the read's bounds (its Records are not
// kept).
func (c *Control) History(ctx context.Context, stream string, from int64) ([]HistoryEvent, ControlPage, error) {
	page, err := c.log.ReadControl(ctx, from)
	if err != nil {
		return nil, page, fmt.Errorf("reading control topic %s: %w", c.topic, err)
	}
	var hist []HistoryEvent
	for _, rec := range page.Records {
		if string(rec.Key) != stream || rec.Value == nil {
			continue
		}
		ev, err := c.codec.Decode(rec.Value)
		if err != nil {
			return nil, page, fmt.Errorf("decoding control event at %s@%d: %w", c.topic, rec.Offset, err)
		}
		if (ev.Watermark != nil && ev.Watermark.Stream != stream) || (ev.Undo != nil && ev.Undo.Stream != stream) {
			continue
		}
		hist = append(hist, HistoryEvent{Offset: rec.Offset, Event: ev})
	}
	page.Records = nil
	return hist, page, nil
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
			"which is not a committed watermark of the stream with a checkpoint: the control topic was truncated or rewritten",
			hist[i].Offset, w.State.BaseOffset)
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
