package offsets

import (
	"errors"
	"fmt"
	"math"

	"github.com/linkedin/goavro/v2"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/schemas"
)

// ControlKind tells the two control events apart.
type ControlKind uint8

const (
	// ControlWatermark is a Watermark event.
	ControlWatermark ControlKind = iota + 1
	// ControlUndo is an Undo event.
	ControlUndo
)

// String returns "watermark" or "undo".
func (k ControlKind) String() string {
	switch k {
	case ControlWatermark:
		return "watermark"
	case ControlUndo:
		return "undo"
	}
	return fmt.Sprintf("ControlKind(%d)", uint8(k))
}

// CommittedBatch is one batch listed by a Watermark: a Batch of the
// checkpoint's log and the number of its rows.
type CommittedBatch struct {
	BatchID  string
	Sequence uint64
	Ranges   []reorg.BlockRange
	Rows     uint64
	Spans    []Span
}

// Watermark is the control event written in the transaction that commits
// the batches it lists (schemas/watermark.avsc).
type Watermark struct {
	Stream   string
	Sequence uint64
	TsMs     int64
	// Cursor is the resume cursor after this watermark.
	Cursor  reorg.Cursor
	Batches []CommittedBatch
	// Rows is the number of rows of all listed batches.
	Rows uint64
	// Checkpoint is the stream's checkpoint after this transaction, as
	// encoded by the offsets package: what reconciliation rebuilds a lost
	// or stale checkpoint store from. Empty in events that carry none.
	Checkpoint []byte
	// Backfill is set on the watermarks of a backfill: the partition the
	// listed batches belong to. Their ranges are the blocks published.
	Backfill *BackfillPartition
	// State is set on the live stream's watermarks: what, with the batches
	// of this and the earlier watermarks since BaseOffset, rebuilds the
	// checkpoint of an event that carries none.
	State *StreamState
}

// StreamState is the part of a stream's checkpoint that a watermark event
// without a checkpoint copy carries.
type StreamState struct {
	// Next is the next sequence number after the transaction.
	Next uint64
	// Retained are the sequence numbers of the retained watermarks, oldest
	// first.
	Retained []uint64
	// Incomplete is the reorg snapshot's Incomplete flag.
	Incomplete bool
	// BaseOffset is the control-topic offset of the newest earlier event
	// of the stream that carries a checkpoint; -1 when this one does.
	BaseOffset int64
}

// BackfillPartition is the half-open block span [From, To) of a backfill
// partition.
type BackfillPartition struct {
	From, To uint64
}

// InvalidatedRange is the block range of one network an Undo invalidates.
type InvalidatedRange struct {
	Network string
	Start   uint64
	End     uint64
}

// Undo is the control event written in the transaction that retracts
// committed batches (schemas/undo.avsc).
type Undo struct {
	Stream   string
	Sequence uint64
	TsMs     int64
	// Cause is "reorg" or "rewind".
	Cause    string
	BatchIDs []string
	Ranges   []InvalidatedRange
	// FirstSequence and LastSequence bound the invalidated batches' sequences.
	FirstSequence uint64
	LastSequence  uint64
}

// ControlEvent is a decoded control event: exactly one of Watermark and Undo
// is set, as Kind says.
type ControlEvent struct {
	Kind      ControlKind
	Watermark *Watermark
	Undo      *Undo
}

// ControlCodec encodes and decodes the control events with goavro (they are
// few, so this path is not optimised). Events are written with single-object
// encoding, so a reader tells them apart by fingerprint and needs no
// registry. It is safe for concurrent use.
type ControlCodec struct {
	wm, undo *goavro.Codec
}

// NewControlCodec compiles the embedded control-event schemas.
func NewControlCodec() (*ControlCodec, error) {
	wm, err := goavro.NewCodec(schemas.Watermark())
	if err != nil {
		return nil, fmt.Errorf("compiling watermark.avsc: %w", err)
	}
	undo, err := goavro.NewCodec(schemas.Undo())
	if err != nil {
		return nil, fmt.Errorf("compiling undo.avsc: %w", err)
	}
	return &ControlCodec{wm: wm, undo: undo}, nil
}

// Schema returns the Avro schema text of a control event kind.
func (c *ControlCodec) Schema(k ControlKind) string {
	if k == ControlUndo {
		return schemas.Undo()
	}
	return schemas.Watermark()
}

func toLong(name string, v uint64) (int64, error) {
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("%s %d does not fit an Avro long", name, v)
	}
	return int64(v), nil
}

func rangeNative(r reorg.BlockRange) (map[string]any, error) {
	s, err := toLong("range start", r.Start)
	if err != nil {
		return nil, err
	}
	e, err := toLong("range end", r.End)
	if err != nil {
		return nil, err
	}
	var prev, ts any
	if r.HasPrevHash {
		prev = goavro.Union("string", r.PrevHash.String())
	}
	if r.Timestamp != 0 {
		t, err := toLong("range timestamp", r.Timestamp)
		if err != nil {
			return nil, err
		}
		ts = goavro.Union("long", t)
	}
	return map[string]any{"network": r.Network, "start": s, "end": e, "hash": r.Hash.String(), "prev_hash": prev, "timestamp": ts}, nil
}

// AppendWatermark appends w, single-object encoded, to dst.
func (c *ControlCodec) AppendWatermark(dst []byte, w Watermark) ([]byte, error) {
	seq, err := toLong("sequence", w.Sequence)
	if err != nil {
		return dst, fmt.Errorf("encoding watermark: %w", err)
	}
	rows, err := toLong("rows", w.Rows)
	if err != nil {
		return dst, fmt.Errorf("encoding watermark: %w", err)
	}
	cursor := []any{}
	for _, n := range w.Cursor.Networks() {
		p := w.Cursor[n]
		num, err := toLong("cursor number", p.Number)
		if err != nil {
			return dst, fmt.Errorf("encoding watermark: %w", err)
		}
		cursor = append(cursor, map[string]any{"network": n, "number": num, "hash": p.Hash.String()})
	}
	batches := []any{}
	for _, b := range w.Batches {
		bseq, err := toLong("batch sequence", b.Sequence)
		if err != nil {
			return dst, fmt.Errorf("encoding watermark: %w", err)
		}
		brows, err := toLong("batch rows", b.Rows)
		if err != nil {
			return dst, fmt.Errorf("encoding watermark: %w", err)
		}
		ranges := []any{}
		for _, r := range b.Ranges {
			rn, err := rangeNative(r)
			if err != nil {
				return dst, fmt.Errorf("encoding watermark: %w", err)
			}
			ranges = append(ranges, rn)
		}
		spans := []any{}
		for _, s := range b.Spans {
			spans = append(spans, map[string]any{"topic": s.Topic, "partition": s.Partition, "first": s.First, "last": s.Last})
		}
		batches = append(batches, map[string]any{"batch_id": b.BatchID, "sequence": bseq, "ranges": ranges, "rows": brows, "spans": spans})
	}
	var backfill any
	if p := w.Backfill; p != nil {
		from, err := toLong("backfill from", p.From)
		if err != nil {
			return dst, fmt.Errorf("encoding watermark: %w", err)
		}
		to, err := toLong("backfill to", p.To)
		if err != nil {
			return dst, fmt.Errorf("encoding watermark: %w", err)
		}
		backfill = goavro.Union("amp.bridge.control.BackfillPartition", map[string]any{"from": from, "to": to})
	}
	var state any
	if st := w.State; st != nil {
		next, err := toLong("next sequence", st.Next)
		if err != nil {
			return dst, fmt.Errorf("encoding watermark: %w", err)
		}
		retained := make([]any, len(st.Retained))
		for i, s := range st.Retained {
			if retained[i], err = toLong("retained sequence", s); err != nil {
				return dst, fmt.Errorf("encoding watermark: %w", err)
			}
		}
		state = goavro.Union("amp.bridge.control.StreamState", map[string]any{"next": next, "retained": retained,
			"incomplete": st.Incomplete, "base_offset": st.BaseOffset})
	}
	native := map[string]any{"stream": w.Stream, "sequence": seq, "ts_ms": w.TsMs, "cursor": cursor, "batches": batches,
		"rows": rows, "checkpoint": nonNilBytes(w.Checkpoint), "backfill": backfill, "state": state}
	out, err := c.wm.SingleFromNative(dst, native)
	if err != nil {
		return dst, fmt.Errorf("encoding watermark: %w", err)
	}
	return out, nil
}

// AppendUndo appends u, single-object encoded, to dst.
func (c *ControlCodec) AppendUndo(dst []byte, u Undo) ([]byte, error) {
	if u.Cause != "reorg" && u.Cause != "rewind" {
		return dst, fmt.Errorf("encoding undo: cause %q: want reorg or rewind", u.Cause)
	}
	var longs [3]int64
	for i, v := range []uint64{u.Sequence, u.FirstSequence, u.LastSequence} {
		l, err := toLong("sequence", v)
		if err != nil {
			return dst, fmt.Errorf("encoding undo: %w", err)
		}
		longs[i] = l
	}
	ids := []any{}
	for _, id := range u.BatchIDs {
		ids = append(ids, id)
	}
	ranges := []any{}
	for _, r := range u.Ranges {
		s, err := toLong("range start", r.Start)
		if err != nil {
			return dst, fmt.Errorf("encoding undo: %w", err)
		}
		e, err := toLong("range end", r.End)
		if err != nil {
			return dst, fmt.Errorf("encoding undo: %w", err)
		}
		ranges = append(ranges, map[string]any{"network": r.Network, "start": s, "end": e})
	}
	native := map[string]any{"stream": u.Stream, "sequence": longs[0], "ts_ms": u.TsMs, "cause": u.Cause,
		"batch_ids": ids, "ranges": ranges, "first_sequence": longs[1], "last_sequence": longs[2]}
	out, err := c.undo.SingleFromNative(dst, native)
	if err != nil {
		return dst, fmt.Errorf("encoding undo: %w", err)
	}
	return out, nil
}

// Decode decodes a control event written by AppendWatermark or AppendUndo
// (Avro single-object encoding, told apart by the schema fingerprint).
func (c *ControlCodec) Decode(b []byte) (ControlEvent, error) {
	native, rest, err := c.wm.NativeFromSingle(b)
	if err == nil {
		if len(rest) > 0 {
			return ControlEvent{}, fmt.Errorf("decoding watermark: %w: %d trailing bytes", ErrMalformedEvent, len(rest))
		}
		w, err := watermarkFromNative(native.(map[string]any))
		if err != nil {
			return ControlEvent{}, fmt.Errorf("decoding watermark: %w", err)
		}
		return ControlEvent{Kind: ControlWatermark, Watermark: w}, nil
	}
	var wrong goavro.ErrWrongCodec
	if !errors.As(err, &wrong) {
		return ControlEvent{}, fmt.Errorf("decoding control event: %w: %w", ErrMalformedEvent, err)
	}
	native, rest, err = c.undo.NativeFromSingle(b)
	if errors.As(err, &wrong) {
		return ControlEvent{}, fmt.Errorf("decoding control event: %w: schema fingerprint %#016x is neither the watermark's nor the undo's", ErrMalformedEvent, uint64(wrong))
	}
	if err != nil {
		return ControlEvent{}, fmt.Errorf("decoding undo: %w: %w", ErrMalformedEvent, err)
	}
	if len(rest) > 0 {
		return ControlEvent{}, fmt.Errorf("decoding undo: %w: %d trailing bytes", ErrMalformedEvent, len(rest))
	}
	return ControlEvent{Kind: ControlUndo, Undo: undoFromNative(native.(map[string]any))}, nil
}

func rangeFromNative(m map[string]any) (reorg.BlockRange, error) {
	r := reorg.BlockRange{Network: m["network"].(string), Start: uint64(m["start"].(int64)), End: uint64(m["end"].(int64))}
	h, err := reorg.ParseHash(m["hash"].(string))
	if err != nil {
		return r, err
	}
	r.Hash = h
	if p, ok := m["prev_hash"].(map[string]any); ok {
		if r.PrevHash, err = reorg.ParseHash(p["string"].(string)); err != nil {
			return r, err
		}
		r.HasPrevHash = true
	}
	if t, ok := m["timestamp"].(map[string]any); ok {
		r.Timestamp = uint64(t["long"].(int64))
	}
	return r, nil
}

func watermarkFromNative(m map[string]any) (*Watermark, error) {
	w := &Watermark{Stream: m["stream"].(string), Sequence: uint64(m["sequence"].(int64)), TsMs: m["ts_ms"].(int64),
		Rows: uint64(m["rows"].(int64)), Cursor: reorg.Cursor{}}
	if cp, ok := m["checkpoint"].([]byte); ok && len(cp) > 0 {
		w.Checkpoint = cp
	}
	if sv, ok := m["state"].(map[string]any); ok {
		sm := sv["amp.bridge.control.StreamState"].(map[string]any)
		st := &StreamState{Next: uint64(sm["next"].(int64)), Incomplete: sm["incomplete"].(bool), BaseOffset: sm["base_offset"].(int64),
			Retained: []uint64{}}
		for _, v := range sm["retained"].([]any) {
			st.Retained = append(st.Retained, uint64(v.(int64)))
		}
		w.State = st
	}
	if b, ok := m["backfill"].(map[string]any); ok {
		p := b["amp.bridge.control.BackfillPartition"].(map[string]any)
		w.Backfill = &BackfillPartition{From: uint64(p["from"].(int64)), To: uint64(p["to"].(int64))}
	}
	for _, cv := range m["cursor"].([]any) {
		cm := cv.(map[string]any)
		h, err := reorg.ParseHash(cm["hash"].(string))
		if err != nil {
			return nil, err
		}
		w.Cursor[cm["network"].(string)] = reorg.Point{Number: uint64(cm["number"].(int64)), Hash: h}
	}
	for _, bv := range m["batches"].([]any) {
		bm := bv.(map[string]any)
		b := CommittedBatch{BatchID: bm["batch_id"].(string), Sequence: uint64(bm["sequence"].(int64)), Rows: uint64(bm["rows"].(int64))}
		for _, rv := range bm["ranges"].([]any) {
			r, err := rangeFromNative(rv.(map[string]any))
			if err != nil {
				return nil, err
			}
			b.Ranges = append(b.Ranges, r)
		}
		for _, sv := range bm["spans"].([]any) {
			sm := sv.(map[string]any)
			b.Spans = append(b.Spans, Span{Topic: sm["topic"].(string), Partition: sm["partition"].(int32),
				First: sm["first"].(int64), Last: sm["last"].(int64)})
		}
		w.Batches = append(w.Batches, b)
	}
	return w, nil
}

func undoFromNative(m map[string]any) *Undo {
	u := &Undo{Stream: m["stream"].(string), Sequence: uint64(m["sequence"].(int64)), TsMs: m["ts_ms"].(int64),
		Cause: m["cause"].(string), FirstSequence: uint64(m["first_sequence"].(int64)), LastSequence: uint64(m["last_sequence"].(int64))}
	for _, id := range m["batch_ids"].([]any) {
		u.BatchIDs = append(u.BatchIDs, id.(string))
	}
	for _, rv := range m["ranges"].([]any) {
		rm := rv.(map[string]any)
		u.Ranges = append(u.Ranges, InvalidatedRange{Network: rm["network"].(string), Start: uint64(rm["start"].(int64)), End: uint64(rm["end"].(int64))})
	}
	return u
}

// nonNilBytes returns b, or an empty slice for nil (goavro wants []byte).
func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Batch returns the batch as the checkpoint's batch log holds it.
func (cb CommittedBatch) Batch() Batch {
	return Batch{Seq: cb.Sequence, ID: cb.BatchID, Ranges: cb.Ranges, Spans: cb.Spans}
}
