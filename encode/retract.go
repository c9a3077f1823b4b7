package encode

import (
	"fmt"
	"sync"
)

// Retractor turns an original change event, read back from Kafka after a
// reorg, into its retraction without decoding the row: the row's bytes are
// found by schema-aware skipping and copied as they are.
//
//   - Debezium envelope: `before` = the original `after`, `after` = null,
//     op = "d", ts_ms = the given time, source.cause = the given cause; every
//     other source field is kept.
//   - Flat envelope: the same row with _amp_op = "d", _amp_ts_ms and
//     _amp_cause set.
//
// The retraction keeps the original framing (schema id or fingerprint): it is
// written with the schema the original was written with. A Retractor is safe
// for concurrent use.
type Retractor struct {
	mu      sync.RWMutex
	layouts map[Framing]*avroType
}

// NewRetractor returns a Retractor that knows no schema yet.
func NewRetractor() *Retractor { return &Retractor{layouts: map[Framing]*avroType{}} }

// Add registers the writer schema of records framed with f. The schema must
// be a value envelope written by this package (Debezium or flat).
func (r *Retractor) Add(f Framing, schema string) error {
	t, err := parseSchema(schema)
	if err != nil {
		return fmt.Errorf("adding retraction schema for %s: %w", f, err)
	}
	if t.kind != kRecord {
		return fmt.Errorf("adding retraction schema for %s: not a record", f)
	}
	_, op := t.field("op")
	_, after := t.field("after")
	_, before := t.field("before")
	_, flatOp := t.field("_amp_op")
	switch {
	case op != nil && after != nil && before != nil:
	case flatOp != nil:
	default:
		return fmt.Errorf("adding retraction schema for %s: record %s is neither a Debezium envelope (before, after, op) nor a flat envelope (_amp_op)",
			f, t.fullName())
	}
	r.mu.Lock()
	r.layouts[f] = t
	r.mu.Unlock()
	return nil
}

// Knows reports whether records framed with f can be retracted.
func (r *Retractor) Knows(f Framing) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.layouts[f] != nil
}

// Retract appends the retraction of orig (a framed value) to dst. tsMs is
// the retraction's event time; cause ("reorg" or "rewind") goes to
// source.cause. An unknown schema is an *UnknownSchemaError; a record that is
// not an insert is ErrNotInsert.
func (r *Retractor) Retract(dst, orig []byte, tsMs int64, cause string) ([]byte, error) {
	f, body, err := ParseHeader(orig)
	if err != nil {
		return dst, fmt.Errorf("retracting record: %w", err)
	}
	r.mu.RLock()
	t := r.layouts[f]
	r.mu.RUnlock()
	if t == nil {
		return dst, fmt.Errorf("retracting record: %w", &UnknownSchemaError{Framing: f})
	}
	mark := len(dst)
	dst = f.AppendHeader(dst)
	if _, flatOp := t.field("_amp_op"); flatOp != nil {
		dst, err = retractFlat(dst, t, body, tsMs, cause)
	} else {
		dst, err = retractDebezium(dst, t, body, tsMs, cause)
	}
	if err != nil {
		return dst[:mark], fmt.Errorf("retracting record (%s): %w", f, err)
	}
	return dst, nil
}

// extents returns the [start, end) of each field of record t in b, in out
// when it is long enough (callers pass a stack array).
func extents(t *avroType, b []byte, out [][2]int) ([][2]int, error) {
	if cap(out) < len(t.fields) {
		out = make([][2]int, len(t.fields))
	}
	out = out[:len(t.fields)]
	pos := 0
	for i, f := range t.fields {
		end, err := skipValue(f.typ, b, pos)
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", f.name, err)
		}
		out[i] = [2]int{pos, end}
		pos = end
	}
	if pos != len(b) {
		return nil, fmt.Errorf("%w: %d trailing bytes after the record", ErrMalformed, len(b)-pos)
	}
	return out, nil
}

// readString reads a string (or a ["null","string"] union) value.
func readString(t *avroType, b []byte) (string, bool, error) {
	pos := 0
	if t.kind == kUnion {
		idx, p, err := readLong(b, 0)
		if err != nil {
			return "", false, err
		}
		if idx < 0 || int(idx) >= len(t.branches) || t.branches[idx].kind != kString {
			return "", false, nil
		}
		pos = p
	} else if t.kind != kString {
		return "", false, nil
	}
	n, p, err := readLong(b, pos)
	if err != nil {
		return "", false, err
	}
	if _, err := advance(b, p, int(n)); err != nil {
		return "", false, err
	}
	return string(b[p : p+int(n)]), true, nil
}

// branchIndex returns the index of the first union branch of kind k.
func branchIndex(t *avroType, k kind) int {
	for i, br := range t.branches {
		if br.kind == k {
			return i
		}
	}
	return -1
}

// appendAs writes v (a string or an int64, or nil for null) as a value of
// type t, choosing the matching union branch.
func appendAs(dst []byte, t *avroType, v any) ([]byte, error) {
	want := kNull
	switch v.(type) {
	case string:
		want = kString
	case int64:
		want = kLong
	}
	if t.kind == kUnion {
		idx := branchIndex(t, want)
		if idx < 0 {
			return dst, fmt.Errorf("union %s has no %s branch", t.marshal(), want)
		}
		dst = appendLong(dst, int64(idx))
		t = t.branches[idx]
	}
	switch x := v.(type) {
	case string:
		if t.kind != kString {
			return dst, fmt.Errorf("cannot write a string as %s", t.kind)
		}
		return appendString(dst, x), nil
	case int64:
		if t.kind != kLong {
			return dst, fmt.Errorf("cannot write a long as %s", t.kind)
		}
		return appendLong(dst, x), nil
	}
	if t.kind != kNull {
		return dst, fmt.Errorf("cannot write null as %s", t.kind)
	}
	return dst, nil
}

func optionalString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func checkInsertOp(op string, ok bool) error {
	if !ok || (op != "c" && op != "r") {
		return fmt.Errorf("%w: op %q", ErrNotInsert, op)
	}
	return nil
}

func retractFlat(dst []byte, t *avroType, body []byte, tsMs int64, cause string) ([]byte, error) {
	var buf [32][2]int
	ext, err := extents(t, body, buf[:0])
	if err != nil {
		return dst, err
	}
	for i, f := range t.fields {
		e := ext[i]
		switch f.name {
		case "_amp_op":
			// Own names: the appendAs error below must reach the outer err.
			op, ok, rerr := readString(f.typ, body[e[0]:e[1]])
			if rerr != nil {
				return dst, rerr
			}
			if cerr := checkInsertOp(op, ok); cerr != nil {
				return dst, cerr
			}
			dst, err = appendAs(dst, f.typ, "d")
		case "_amp_ts_ms":
			dst, err = appendAs(dst, f.typ, tsMs)
		case "_amp_cause":
			dst, err = appendAs(dst, f.typ, optionalString(cause))
		default:
			dst = append(dst, body[e[0]:e[1]]...)
		}
		if err != nil {
			return dst, fmt.Errorf("field %q: %w", f.name, err)
		}
	}
	return dst, nil
}

func retractDebezium(dst []byte, t *avroType, body []byte, tsMs int64, cause string) ([]byte, error) {
	var buf [8][2]int
	ext, err := extents(t, body, buf[:0])
	if err != nil {
		return dst, err
	}
	bi, before := t.field("before")
	ai, after := t.field("after")
	oi, op := t.field("op")
	opv, ok, err := readString(op.typ, body[ext[oi][0]:ext[oi][1]])
	if err != nil {
		return dst, err
	}
	if err := checkInsertOp(opv, ok); err != nil {
		return dst, err
	}
	// The original after: its union branch, then the row.
	ab := body[ext[ai][0]:ext[ai][1]]
	aidx, rowStart, err := readLong(ab, 0)
	if err != nil {
		return dst, err
	}
	if after.typ.kind != kUnion || aidx < 0 || int(aidx) >= len(after.typ.branches) || after.typ.branches[aidx].kind == kNull {
		return dst, fmt.Errorf("%w: `after` is null", ErrNotInsert)
	}
	rowType := after.typ.branches[aidx]
	row := ab[rowStart:]
	if bb := body[ext[bi][0]:ext[bi][1]]; len(bb) != 1 || bb[0] != byte(2*branchIndex(before.typ, kNull)) {
		return dst, fmt.Errorf("%w: `before` is not null", ErrNotInsert)
	}
	for i, f := range t.fields {
		e := ext[i]
		switch f.name {
		case "before":
			idx := -1
			for k, br := range f.typ.branches {
				if br == rowType || (br.kind == rowType.kind && br.fullName() == rowType.fullName()) {
					idx = k
					break
				}
			}
			if idx < 0 {
				return dst, fmt.Errorf("`before` union has no branch %s", rowType.fullName())
			}
			dst = appendLong(dst, int64(idx))
			dst = append(dst, row...)
		case "after":
			dst, err = appendAs(dst, f.typ, nil)
		case "op":
			dst, err = appendAs(dst, f.typ, "d")
		case "ts_ms":
			dst, err = appendAs(dst, f.typ, tsMs)
		case "source":
			dst, err = rewriteSource(dst, f.typ, body[e[0]:e[1]], cause)
		default:
			dst = append(dst, body[e[0]:e[1]]...)
		}
		if err != nil {
			return dst, fmt.Errorf("field %q: %w", f.name, err)
		}
	}
	return dst, nil
}

// rewriteSource copies the source record, replacing its cause.
func rewriteSource(dst []byte, t *avroType, b []byte, cause string) ([]byte, error) {
	if t.kind != kRecord {
		return append(dst, b...), nil
	}
	var buf [16][2]int
	ext, err := extents(t, b, buf[:0])
	if err != nil {
		return dst, err
	}
	for i, f := range t.fields {
		if f.name == "cause" {
			if dst, err = appendAs(dst, f.typ, optionalString(cause)); err != nil {
				return dst, fmt.Errorf("source.cause: %w", err)
			}
			continue
		}
		dst = append(dst, b[ext[i][0]:ext[i][1]]...)
	}
	return dst, nil
}
