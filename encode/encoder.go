package encode

import (
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// Connector is the value of source.connector in every event.
const Connector = "amp-kafka-bridge"

// Op is the change operation of an event (Debezium's `op`).
type Op byte

const (
	// OpCreate is a live insert.
	OpCreate Op = 'c'
	// OpRead is a backfill insert (Debezium's snapshot read).
	OpRead Op = 'r'
	// OpDelete is a retraction.
	OpDelete Op = 'd'
)

// String returns "c", "r" or "d".
func (o Op) String() string { return string(o) }

// BatchMeta describes the record batch handed to Encode: which microbatch it
// belongs to and how its rows are to be labelled.
type BatchMeta struct {
	// Op is the operation of every row: OpCreate, OpRead or OpDelete.
	Op Op
	// Ranges are the microbatch's block ranges (at least one). source.network
	// and source.range_hash join all ranges with "|"; source.range_start and
	// source.range_end come from the first range.
	Ranges []reorg.BlockRange
	// BatchID is the microbatch id; when empty it is reorg.BatchID(Ranges).
	BatchID string
	// TsMs is the event time written to ts_ms (milliseconds since the epoch).
	TsMs int64
	// Snapshot marks backfill rows (source.snapshot).
	Snapshot bool
	// Cause is written to source.cause; empty means null.
	Cause string
	// RowOffset is the index within the microbatch of the batch's first row:
	// source.row = RowOffset + row index (a microbatch can span several
	// Arrow record batches).
	RowOffset int64
}

func (m *BatchMeta) validate() error {
	switch m.Op {
	case OpCreate, OpRead, OpDelete:
	default:
		return fmt.Errorf("batch meta: op %q: want c, r or d", byte(m.Op))
	}
	if len(m.Ranges) == 0 {
		return fmt.Errorf("batch meta: no block ranges: every batch belongs to at least one range")
	}
	if m.RowOffset < 0 {
		return fmt.Errorf("batch meta: negative row offset %d", m.RowOffset)
	}
	return nil
}

type recSpan struct{ vs, ve, ks, ke int }

// Batch holds encoded records in one reusable byte arena. Value(i) and Key(i)
// return sub-slices of the arena: they stay valid until Reset, after which
// the memory is reused. Keep one Batch per in-flight transaction and Reset it
// only when Kafka has acknowledged (or aborted) its records.
type Batch struct {
	buf  []byte
	recs []recSpan
}

// Len returns the number of records.
func (b *Batch) Len() int { return len(b.recs) }

// Value returns the framed Avro value of record i.
func (b *Batch) Value(i int) []byte { r := b.recs[i]; return b.buf[r.vs:r.ve:r.ve] }

// Key returns the key of record i: the Avro key record (framed) in row-key
// mode, otherwise the batch id as UTF-8 text.
func (b *Batch) Key(i int) []byte { r := b.recs[i]; return b.buf[r.ks:r.ke:r.ke] }

// Size returns the bytes used in the arena.
func (b *Batch) Size() int { return len(b.buf) }

// Mem returns the bytes the batch holds in memory: the capacity of its
// arena and of its record table, which Reset keeps for reuse and which
// can be up to twice what Size counts.
func (b *Batch) Mem() int { return cap(b.buf) + cap(b.recs)*int(unsafe.Sizeof(recSpan{})) }

// Reset empties the batch and keeps its memory for reuse.
func (b *Batch) Reset() { b.buf, b.recs = b.buf[:0], b.recs[:0] }

// Encoder is a schema compiled for one Arrow schema and Config: it writes
// Avro binary straight from Arrow columns, without maps, reflection or
// allocations per row. It is not safe for concurrent use; make one per
// goroutine.
type Encoder struct {
	cfg    Config
	schema *arrow.Schema
	// equal is the last batch schema found Equal to schema: an IPC reader
	// gives every batch of a stream the same *Schema, so the field-by-field
	// comparison (4% of the CPU of a 27-column stream) runs once per stream.
	// Schemas are immutable, so pointer identity implies equality.
	equal    *arrow.Schema
	cs       *compiledSchema
	st       encState
	vhdr     []byte
	khdr     []byte
	vframe   Framing
	kframe   Framing
	blk      blockNumReader
	seg      []byte // per-batch constant segments
	s1, s2   int    // segment boundaries in seg
	perRow   int    // bytes per row of the previous batch, to pre-size the arena
	rowAvro  bool   // row-key mode
	debezium bool
	ops      []op // the columns of the bound batch
	keyOps   []op
	head     []byte // per batch: value header + envelope bytes before the row
	mid      []byte // per batch: envelope bytes after the row up to source.block_num
	tail     []byte // per block: mid, source.block_num and the bytes up to source.row
	// empty holds an array without rows of each column's type, bound
	// after every Encode so that the writers let go of the batch they
	// encoded: an IPC batch's arrays point into one buffer of its whole
	// message (up to ~2 MiB), which an idle stream would otherwise keep
	// until its next batch.
	empty []arrow.Array
}

// NewEncoder compiles the Avro schemas and the column writers for s. Its
// framing defaults to single-object encoding; call SetFraming with registry
// ids to write the Confluent wire format.
func NewEncoder(cfg Config, s *arrow.Schema) (*Encoder, error) {
	e := &Encoder{cfg: cfg, schema: s, debezium: cfg.Envelope == EnvelopeDebezium, rowAvro: len(cfg.KeyColumns) > 0}
	cs, err := compileSchema(cfg, s, &e.st)
	if err != nil {
		return nil, err
	}
	e.cs = cs
	vf, err := SingleObjectFraming(cs.schemas.Value)
	if err != nil {
		return nil, fmt.Errorf("framing value schema: %w", err)
	}
	var kf Framing
	if e.rowAvro {
		if kf, err = SingleObjectFraming(cs.schemas.Key); err != nil {
			return nil, fmt.Errorf("framing key schema: %w", err)
		}
	}
	e.SetFraming(vf, kf)
	e.blk.col = cs.blockCol
	e.empty = make([]arrow.Array, s.NumFields())
	for i, f := range s.Fields() {
		e.empty[i] = emptyArray(f.Type)
	}
	return e, nil
}

// emptyArray returns an array of dt without rows, or nil for a type
// arrow-go's builders do not make.
func emptyArray(dt arrow.DataType) (a arrow.Array) {
	defer func() {
		if recover() != nil {
			a = nil
		}
	}()
	b := array.NewBuilder(memory.DefaultAllocator, dt)
	defer b.Release()
	return b.NewArray()
}

// unbind binds the writers to e.empty's arrays.
func (e *Encoder) unbind() {
	for j, w := range e.cs.cols {
		if a := e.empty[j]; a != nil {
			_ = w.bind(a) // the same type was bound before
		}
	}
	for k, w := range e.cs.keyCols {
		if a := e.empty[e.cs.keyIndex[k]]; a != nil {
			_ = w.bind(a)
		}
	}
	e.blk.release()
	unbindOps(e.ops)
	unbindOps(e.keyOps)
}

// unbindOps drops the ops' slices of the columns they were chosen for,
// keeping what they are (kind, writer).
func unbindOps(ops []op) {
	for i := range ops {
		o := &ops[i]
		o.bits, o.data, o.u64, o.i64, o.i32, o.u32, o.offs = nil, nil, nil, nil, nil, nil, nil
	}
}

// Schemas returns the Avro schemas the encoder writes.
func (e *Encoder) Schemas() Schemas { return e.cs.schemas }

// SetFraming sets the headers written before values and (in row-key mode)
// keys: ConfluentFraming with registry ids, or SingleObjectFraming.
func (e *Encoder) SetFraming(value, key Framing) {
	e.vframe, e.kframe = value, key
	e.vhdr = value.AppendHeader(nil)
	e.khdr = key.AppendHeader(nil)
}

// ValueFraming returns the framing of values.
func (e *Encoder) ValueFraming() Framing { return e.vframe }

// KeyFraming returns the framing of keys (zero when keyed by batch id).
func (e *Encoder) KeyFraming() Framing { return e.kframe }

// Encode appends one record per row of rec to out. On error nothing is
// appended and the error names the column, row and value (*ValueError) or
// the schema mismatch. rec is only read during the call: Encode neither
// retains nor releases it.
func (e *Encoder) Encode(rec arrow.RecordBatch, meta BatchMeta, out *Batch) error {
	if rs := rec.Schema(); rs != e.schema && rs != e.equal {
		if !rs.Equal(e.schema) {
			return fmt.Errorf("encoding batch %s: %w: got %s, want %s",
				meta.BatchID, ErrSchemaChanged, rs, e.schema)
		}
		e.equal = rs
	}
	if err := meta.validate(); err != nil {
		return fmt.Errorf("encoding batch: %w", err)
	}
	batchID := meta.BatchID
	if batchID == "" {
		batchID = reorg.BatchID(meta.Ranges)
	}
	e.st.err = nil
	defer e.unbind()
	for j, w := range e.cs.cols {
		if err := w.bind(rec.Column(j)); err != nil {
			return fmt.Errorf("encoding batch %s: binding column %q: %w", batchID, e.schema.Field(j).Name, err)
		}
	}
	for k, w := range e.cs.keyCols {
		if err := w.bind(rec.Column(e.cs.keyIndex[k])); err != nil {
			return fmt.Errorf("encoding batch %s: binding key column %q: %w", batchID, e.cfg.KeyColumns[k], err)
		}
	}
	e.blk.bind(rec, &e.st)
	e.buildSegments(&meta, batchID)
	e.ops = chooseOps(e.ops, e.cs.cols, e.st.noOps)
	e.keyOps = chooseOps(e.keyOps, e.cs.keyCols, e.st.noOps)

	n := int(rec.NumRows())
	b, recs := out.buf, out.recs
	mark, rmark := len(b), len(recs)
	ks, ke := 0, 0
	if !e.rowAvro {
		ks = len(b)
		b = append(b, batchID...)
		ke = len(b)
	}
	if need := n * e.perRow; cap(b)-len(b) < need {
		b = slices.Grow(b, need)
	}
	if cap(recs)-len(recs) < n {
		recs = slices.Grow(recs, n)
	}
	seg1, seg2, seg3 := e.seg[:e.s1], e.seg[e.s1:e.s2], e.seg[e.s2:]
	var pre, post []byte
	if e.debezium {
		if meta.Op == OpDelete {
			pre, post = []byte{2}, []byte{0}
		} else {
			pre = []byte{0, 2}
		}
	}
	// The record's constant head (framing header and the envelope's before
	// and after branches) and the constant part between the row and
	// source.block_num are each copied once per row.
	e.head = append(append(e.head[:0], e.vhdr...), pre...)
	e.mid = append(append(e.mid[:0], post...), seg1...)
	head, mid := e.head, e.mid
	ops, keyOps := e.ops, e.keyOps
	// The bytes from the end of the row up to source.row depend only on
	// the block number, which rows of one block share: they are built when
	// it changes and then copied at once.
	tail, tailKey, tailNull, tailOK := e.tail[:0], uint64(0), false, false
	// The head and the bytes after source.row are short: they are copied
	// as 16-byte words, without a call, when they fit.
	var head16, seg16 [16]byte
	short := len(head) <= 16 && len(seg3) <= 16 && meta.RowOffset+int64(n) < 1<<27
	copy(head16[:], head)
	copy(seg16[:], seg3)
	// Amp's _block_num (UInt64 without nulls) is read inline; other block
	// columns through blk.key.
	var bkeys []uint64
	if e.blk.u64 != nil && e.blk.v.bits == nil {
		bkeys = e.blk.u64[e.blk.v.off : e.blk.v.off+n]
	}
	start := len(b)
	for i := range n {
		e.st.row = i
		vs := len(b)
		if short {
			if cap(b)-vs < 16 {
				b = growSlow(b, 16)
			}
			*(*[16]byte)(b[vs : vs+16]) = head16
			b = b[:vs+len(head)]
		} else {
			b = append(b, head...)
		}
		b = writeOps(b, ops, i)
		var k uint64
		var null bool
		if bkeys != nil {
			k = bkeys[i]
		} else {
			k, null = e.blk.key(i)
		}
		if !tailOK || k != tailKey || null != tailNull {
			tail = append(e.blk.append(append(tail[:0], mid...), i), seg2...)
			tailKey, tailNull, tailOK = k, null, e.st.err == nil
		}
		b = append(b, tail...)
		if short {
			p := len(b)
			if cap(b)-p < 4+16 {
				b = growSlow(b, 4+16)
			}
			p += putVarint4((*[10]byte)(b[p:p+10]), uint64(meta.RowOffset+int64(i))<<1)
			*(*[16]byte)(b[p : p+16]) = seg16
			b = b[:p+len(seg3)]
		} else {
			b = appendLong(b, meta.RowOffset+int64(i))
			b = append(b, seg3...)
		}
		ve := len(b)
		if e.rowAvro {
			ks = len(b)
			b = append(b, e.khdr...)
			b = writeOps(b, keyOps, i)
			ke = len(b)
		}
		if e.st.err != nil {
			err := e.st.err
			e.st.err = nil
			out.buf, out.recs = b[:mark], recs[:rmark]
			return fmt.Errorf("encoding batch %s: %w", batchID, err)
		}
		recs = append(recs, recSpan{vs, ve, ks, ke})
	}
	e.tail = tail
	if n > 0 {
		e.perRow = (len(b)-start)/n + 16
	}
	out.buf, out.recs = b, recs
	return nil
}

// buildSegments writes the per-batch constant parts of every record.
func (e *Encoder) buildSegments(m *BatchMeta, batchID string) {
	s := e.seg[:0]
	// One range (the usual case) is written without building strings, so
	// that Encode allocates nothing once its buffers have grown.
	single := len(m.Ranges) == 1
	var network, hash, prev string
	if single {
		network = m.Ranges[0].Network
	} else {
		network, hash, prev = joinRanges(m.Ranges)
	}
	if e.debezium {
		s = appendString(s, Connector)
		s = appendString(s, e.cfg.Version)
		s = appendString(s, e.cfg.Stream)
		s = appendString(s, network)
	} else {
		s = appendString(s, string(m.Op))
		s = appendLong(s, m.TsMs)
		s = appendString(s, e.cfg.Stream)
		s = appendString(s, network)
	}
	e.s1 = len(s)
	s = appendString(s, batchID)
	s = appendLong(s, int64(m.Ranges[0].Start))
	s = appendLong(s, int64(m.Ranges[0].End))
	if r := &m.Ranges[0]; single {
		s = appendHash(s, &r.Hash)
		if r.HasPrevHash {
			s = append(s, 2)
			s = appendHash(s, &r.PrevHash)
		} else {
			s = append(s, 0)
		}
	} else {
		s = appendString(s, hash)
		s = appendOptString(s, prev)
	}
	e.s2 = len(s)
	s = append(s, boolByte(m.Snapshot))
	s = appendOptString(s, m.Cause)
	if e.debezium {
		s = appendString(s, string(m.Op))
		s = appendLong(s, m.TsMs)
	}
	e.seg = s
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// appendHash writes h as an Avro string in its text form ("0x" and 64
// lowercase hex digits, as reorg.Hash.String).
func appendHash(b []byte, h *reorg.Hash) []byte {
	b = appendLong(b, int64(2+2*len(h)))
	b = append(b, '0', 'x')
	return hex.AppendEncode(b, h[:])
}

// appendOptString writes a ["null","string"] union: null for "".
func appendOptString(b []byte, s string) []byte {
	if s == "" {
		return append(b, 0)
	}
	b = append(b, 2)
	return appendString(b, s)
}

// joinRanges returns the networks, hashes and prev hashes of ranges joined
// with "|" (prev is "" when no range has one).
func joinRanges(rs []reorg.BlockRange) (network, hash, prev string) {
	if len(rs) == 1 {
		r := rs[0]
		if r.HasPrevHash {
			prev = r.PrevHash.String()
		}
		return r.Network, r.Hash.String(), prev
	}
	var nb, hb, pb strings.Builder
	anyPrev := false
	for i, r := range rs {
		if i > 0 {
			nb.WriteByte('|')
			hb.WriteByte('|')
			pb.WriteByte('|')
		}
		nb.WriteString(r.Network)
		hb.WriteString(r.Hash.String())
		if r.HasPrevHash {
			anyPrev = true
			pb.WriteString(r.PrevHash.String())
		}
	}
	if anyPrev {
		prev = pb.String()
	}
	return nb.String(), hb.String(), prev
}

// blockNumReader reads source.block_num from the _block_num (or block_num)
// column.
type blockNumReader struct {
	col  int
	st   *encState
	name string
	v    valid
	u64  []uint64
	i64  []int64
	u32  []uint32
	i32  []int32
}

// release lets go of the bound column.
func (r *blockNumReader) release() {
	r.u64, r.i64, r.u32, r.i32 = nil, nil, nil, nil
	r.v.bits = nil
}

func (r *blockNumReader) bind(rec arrow.RecordBatch, st *encState) {
	r.u64, r.i64, r.u32, r.i32 = nil, nil, nil, nil
	if r.col < 0 {
		return
	}
	a := rec.Column(r.col)
	r.st, r.name = st, rec.Schema().Field(r.col).Name
	r.v.bindValidity(a)
	switch a.DataType().ID() {
	case arrow.UINT64:
		r.u64 = arrow.GetData[uint64](buf(a, 1))
	case arrow.INT64:
		r.i64 = arrow.GetData[int64](buf(a, 1))
	case arrow.UINT32:
		r.u32 = arrow.GetData[uint32](buf(a, 1))
	case arrow.INT32:
		r.i32 = arrow.GetData[int32](buf(a, 1))
	}
}

// key returns the raw block number of row i, or null: rows with equal keys
// have equal source.block_num.
func (r *blockNumReader) key(i int) (k uint64, null bool) {
	if r.col < 0 || r.v.isNull(i) {
		return 0, true
	}
	j := r.v.off + i
	switch {
	case r.u64 != nil:
		return r.u64[j], false
	case r.i64 != nil:
		return uint64(r.i64[j]), false
	case r.u32 != nil:
		return uint64(r.u32[j]), false
	case r.i32 != nil:
		return uint64(uint32(r.i32[j])), false
	}
	return 0, true
}

func (r *blockNumReader) append(b []byte, i int) []byte {
	if r.col < 0 || r.v.isNull(i) {
		return append(b, 0)
	}
	j := r.v.off + i
	var v int64
	switch {
	case r.u64 != nil:
		u := r.u64[j]
		if u > math.MaxInt64 {
			r.st.fail(r.name, strconv.FormatUint(u, 10), "block number above 2^63-1 does not fit source.block_num")
			return append(b, 0)
		}
		v = int64(u)
	case r.i64 != nil:
		v = r.i64[j]
	case r.u32 != nil:
		v = int64(r.u32[j])
	case r.i32 != nil:
		v = int64(r.i32[j])
	}
	b = append(b, 2)
	return appendLong(b, v)
}
