package ampsim

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// Replay mode (Config.ReplayBlocks > 0) exists for throughput benchmarks:
// generating a mainnet transaction row costs about a microsecond, as much
// as the whole bridge spends on it, so a benchmark fed by the generator
// measures the generator. In replay mode the rows of the transactions and
// logs tables are generated once, for ReplayBlocks template blocks, and
// block b serves the rows of template replayIndex(b) with only its
// block-dependent columns rewritten:
//
//   - _block_num and block_num are b.Number, timestamp is b's, block_hash
//     is b.Hash;
//   - tx_hash is the template's tx_hash XOR b.Hash, so it stays unique per
//     block and the logs of a transaction still join it.
//
// Every read path (unfiltered scans, filtered scans, COUNT(*), LIMIT,
// Chain.ExpectedRows) goes through the same replayed rows, so streaming,
// batch and verification queries agree. An unfiltered scan of one table is
// additionally served as zero-copy slices of a pre-built Arrow batch of the
// templates (replayBatch), so only the rewritten columns cost anything per
// row. The protocol's rules (messages, metadata, where batches are cut) are
// unchanged.

// replayForkStride shifts the template of blocks on a new fork, so a reorg
// replaces a block with different rows (and usually a different count).
const replayForkStride = 7919

// colKind says how replay rewrites a source column.
type colKind int

const (
	colKeep colKind = iota
	colBlockNum
	colBlockHash
	colTimestamp
	colTxHash
)

// replay holds the templates of one chain; it is safe for concurrent use.
type replay struct {
	n   int
	cfg NetworkConfig
	sy  *synth
	mem memory.Allocator

	mu      sync.Mutex
	tables  map[string]*replayTable
	batches map[string]*replayBatch
}

// replayTable is the template rows of one table.
type replayTable struct {
	kinds []colKind // per source column
	rows  [][]row   // per template
	max   int       // most rows of one template
}

// replayBatch is the templates of one table in one projection, as one Arrow
// batch: templates 0..n-1, then again from 0 until at least batchRows more
// rows, so every run of at most batchRows rows starting in the first n
// templates is one contiguous slice.
type replayBatch struct {
	rec   arrow.RecordBatch
	start []int // start[p] is the first row of sequence position p; one extra at the end
	kinds []colKind
}

func newReplay(n int, cfg NetworkConfig, sy *synth, mem memory.Allocator) *replay {
	return &replay{n: n, cfg: cfg, sy: sy, mem: mem, tables: map[string]*replayTable{}, batches: map[string]*replayBatch{}}
}

// replayed reports whether table t is served from templates.
func replayed(t *table) bool { return t.name == TableTransactions || t.name == TableLogs }

// index returns the template of block b.
func (rp *replay) index(b *Block) int {
	return int((b.Number + b.Fork*replayForkStride) % uint64(rp.n))
}

// table returns the templates of t, generating them on first use.
func (rp *replay) table(t *table) *replayTable {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rt := rp.tables[t.name]; rt != nil {
		return rt
	}
	rt := &replayTable{kinds: make([]colKind, t.schema.NumFields()), rows: make([][]row, rp.n)}
	for i, fd := range t.schema.Fields() {
		switch fd.Name {
		case "_block_num", "block_num":
			rt.kinds[i] = colBlockNum
		case "block_hash":
			rt.kinds[i] = colBlockHash
		case "timestamp":
			rt.kinds[i] = colTimestamp
		case "tx_hash":
			rt.kinds[i] = colTxHash
		}
	}
	for j := range rp.n {
		tb := rp.template(j)
		var rs rowSink
		t.gen(rp.sy, rp.cfg, tb, &rs)
		rt.rows[j] = rs.rows
		rt.max = max(rt.max, len(rs.rows))
	}
	rp.tables[t.name] = rt
	return rt
}

// template returns template block j: a block off any chain whose hash
// seeds the generator.
func (rp *replay) template(j int) *Block {
	h := sha256.New()
	h.Write([]byte("ampsim replay template\x00" + rp.cfg.Network + "\x00"))
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], uint64(j))
	h.Write(buf[:])
	b := &Block{Number: uint64(j), Timestamp: rp.cfg.GenesisTime}
	h.Sum(b.Hash[:0])
	return b
}

// count returns the rows of block b.
func (rp *replay) count(t *table, b *Block) int {
	return len(rp.table(t).rows[rp.index(b)])
}

// gen sends the rows of block b to out, as table.gen does.
func (rp *replay) gen(t *table, b *Block, out sink) {
	rt := rp.table(t)
	bh := hashBytes(b.Hash)
	bts := ts(b)
	for _, r := range rt.rows[rp.index(b)] {
		for c, v := range r {
			switch rt.kinds[c] {
			case colBlockNum:
				out.u64(b.Number)
			case colBlockHash:
				out.bin(bh)
			case colTimestamp:
				out.tstamp(bts)
			case colTxHash:
				h := append([]byte(nil), v.([]byte)...)
				xorHash(h, &b.Hash)
				out.bin(h)
			case colKeep:
				emitValue(out, v)
			}
		}
		out.endRow()
	}
}

// xorHash XORs the 32 bytes of h with bh.
func xorHash(h []byte, bh *reorg.Hash) {
	for k := 0; k < 32; k += 8 {
		binary.LittleEndian.PutUint64(h[k:], binary.LittleEndian.Uint64(h[k:])^binary.LittleEndian.Uint64(bh[k:]))
	}
}

// emitValue sends one stored row value to out through the sink method that
// generated it.
func emitValue(out sink, v any) {
	switch x := v.(type) {
	case nil:
		out.null()
	case uint64:
		out.u64(x)
	case uint32:
		out.u32(x)
	case int32:
		out.i32(x)
	case bool:
		out.boolean(x)
	case string:
		out.str(x)
	case []byte:
		out.bin(x)
	case decimal128.Num:
		out.dec(x)
	case arrow.Timestamp:
		out.tstamp(x)
	case []any:
		out.nested(x)
	default:
		panic(fmt.Sprintf("ampsim: replay of a %T value", v))
	}
}

// batch returns the pre-built templates of t projected on cols (the source
// column of each output column) with schema, built on first use with
// room for runs of batchRows rows.
func (rp *replay) batch(t *table, cols []int, schema *arrow.Schema, batchRows int) *replayBatch {
	rt := rp.table(t)
	var key strings.Builder
	key.WriteString(t.name)
	for _, c := range cols {
		key.WriteByte(',')
		key.WriteString(strconv.Itoa(c))
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rb := rp.batches[key.String()]; rb != nil {
		return rb
	}
	bb := newBatchBuilder(rp.mem, schema, 0)
	defer bb.release()
	bs := make([]array.Builder, len(rt.kinds))
	kinds := make([]colKind, len(cols))
	for i, c := range cols {
		bs[c] = bb.b.Field(i)
		kinds[i] = rt.kinds[c]
	}
	sk := &builderSink{bs: bs}
	rb := &replayBatch{kinds: kinds}
	rows, extra := 0, -1
	for p := 0; extra < batchRows+rt.max; p++ {
		if p == rp.n {
			extra = 0
		}
		rb.start = append(rb.start, rows)
		for _, r := range rt.rows[p%rp.n] {
			for _, v := range r {
				emitValue(sk, v)
			}
			sk.endRow()
		}
		n := len(rt.rows[p%rp.n])
		rows += n
		if extra >= 0 {
			extra += n
		}
	}
	rb.start = append(rb.start, rows)
	rb.rec = bb.b.NewRecordBatch()
	rp.batches[key.String()] = rb
	return rb
}

// release frees the pre-built batches.
func (rp *replay) release() {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for k, rb := range rp.batches {
		rb.rec.Release()
		delete(rp.batches, k)
	}
}

// replayPart is the rows of one block within a replaySeg.
type replayPart struct {
	blk  *Block
	rows int
}

// replaySeg is a contiguous row range [lo, hi) of a replayBatch and the
// blocks its rows belong to, in order.
type replaySeg struct {
	lo, hi int
	pos    int // sequence position of the last block
	parts  []replayPart
}

// replayEmitter cuts the rows of consecutive blocks into output batches of
// slices of a replayBatch, with the block columns rewritten.
type replayEmitter struct {
	rp     *replay
	rb     *replayBatch
	schema *arrow.Schema
	mem    memory.Allocator
	segs   []replaySeg
	rows   int
}

// add appends rows [off, off+n) of block b.
func (e *replayEmitter) add(b *Block, off, n int) {
	idx := e.rp.index(b)
	if k := len(e.segs); k > 0 && off == 0 {
		s := &e.segs[k-1]
		next := s.pos + 1
		if next%e.rp.n == idx && next+1 < len(e.rb.start) && s.hi == e.rb.start[next] {
			s.pos = next
			s.hi += n
			s.parts = append(s.parts, replayPart{blk: b, rows: n})
			e.rows += n
			return
		}
	}
	lo := e.rb.start[idx] + off
	e.segs = append(e.segs, replaySeg{lo: lo, hi: lo + n, pos: idx, parts: []replayPart{{blk: b, rows: n}}})
	e.rows += n
}

// flush returns the pending rows as one record batch (nil if none); the
// caller releases it.
func (e *replayEmitter) flush() arrow.RecordBatch {
	if e.rows == 0 {
		return nil
	}
	defer func() { e.segs, e.rows = e.segs[:0], 0 }()
	if len(e.segs) == 1 {
		return e.segment(&e.segs[0])
	}
	// The fork changed inside the batch (a reorg; template wrap-arounds
	// are contiguous in rb):
	// concatenate the segments.
	recs := make([]arrow.RecordBatch, len(e.segs))
	for i := range e.segs {
		recs[i] = e.segment(&e.segs[i])
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	cols := make([]arrow.Array, e.schema.NumFields())
	for c := range cols {
		parts := make([]arrow.Array, len(recs))
		for i, r := range recs {
			parts[i] = r.Column(c)
		}
		a, err := array.Concatenate(parts, e.mem)
		if err != nil {
			panic(fmt.Sprintf("ampsim: concatenating replay segments: %v", err)) // same types: cannot fail
		}
		cols[c] = a
	}
	rec := array.NewRecordBatch(e.schema, cols, int64(e.rows))
	for _, a := range cols {
		a.Release()
	}
	return rec
}

// segment returns the rows of s: slices of the templates, with the block
// columns built anew.
func (e *replayEmitter) segment(s *replaySeg) arrow.RecordBatch {
	n := s.hi - s.lo
	sl := e.rb.rec.NewSlice(int64(s.lo), int64(s.hi))
	defer sl.Release()
	cols := make([]arrow.Array, len(e.rb.kinds))
	for i, k := range e.rb.kinds {
		if k == colKeep {
			cols[i] = sl.Column(i)
			cols[i].Retain()
			continue
		}
		cols[i] = e.blockColumn(k, sl.Column(i), s.parts, n)
	}
	rec := array.NewRecordBatch(e.schema, cols, int64(n))
	for _, a := range cols {
		a.Release()
	}
	return rec
}

// blockColumn builds one rewritten column of n rows for the blocks parts;
// tmpl is the template column (for tx_hash).
func (e *replayEmitter) blockColumn(k colKind, tmpl arrow.Array, parts []replayPart, n int) arrow.Array {
	width := 8
	if k == colBlockHash || k == colTxHash {
		width = 32
	}
	buf := memory.NewResizableBuffer(e.mem)
	buf.Resize(n * width)
	out := buf.Bytes()
	at := 0
	switch k {
	case colBlockNum, colTimestamp:
		for _, p := range parts {
			v := p.blk.Number
			if k == colTimestamp {
				v = uint64(ts(p.blk))
			}
			for range p.rows {
				binary.LittleEndian.PutUint64(out[at:], v)
				at += 8
			}
		}
	case colBlockHash:
		for _, p := range parts {
			for range p.rows {
				copy(out[at:at+32], p.blk.Hash[:])
				at += 32
			}
		}
	case colTxHash:
		src := tmpl.(*array.FixedSizeBinary)
		row := 0
		for _, p := range parts {
			for range p.rows {
				copy(out[at:at+32], src.Value(row))
				xorHash(out[at:at+32], &p.blk.Hash)
				at += 32
				row++
			}
		}
	case colKeep:
	}
	d := array.NewData(tmpl.DataType(), n, []*memory.Buffer{nil, buf}, nil, 0, 0)
	buf.Release()
	a := array.MakeFromData(d)
	d.Release()
	return a
}
