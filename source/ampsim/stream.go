package ampsim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// emitSpec says which rows emitBlocks sends and how.
type emitSpec struct {
	chain  *Chain
	blocks []*Block
	meta   []byte
	// tick is called after every data batch (periodic keep-alives).
	tick func() error
	// limit caps the rows (batch LIMIT); nil for no cap.
	limit *uint64
	// blockCol is the output column of _block_num when a streaming query
	// selects it, -1 otherwise: batches are then cut at a block boundary
	// as Amp's MessageStreamWithBlockComplete cuts them (§2.2, see
	// blockSplitter).
	blockCol int
}

// splitter returns the block splitter of one emitBlocks call (nil when
// batches are not cut at blocks).
func (e emitSpec) splitter() *blockSplitter {
	if e.blockCol < 0 {
		return nil
	}
	return &blockSplitter{col: e.blockCol}
}

// emitBlocks streams the plan's rows of e.blocks (one network) with e.meta:
// rows ordered by block, batches of at most BatchRows rows (DataFusion's
// batches over the microbatch's range, whatever blocks they hold), each cut
// once more at a block boundary per e.blockCol. It returns the number of
// rows sent.
func (s *Server) emitBlocks(w *streamWriter, p *plan, e emitSpec) (int, error) {
	chain, blocks, meta, tick, limit := e.chain, e.blocks, e.meta, e.tick, e.limit
	bb := newBatchBuilder(s.cfg.Allocator, p.schema, 0)
	defer bb.release()
	bs := e.splitter()
	sent := 0
	flush := func() error {
		if bb.rows == 0 {
			return nil
		}
		n := bb.rows
		rec := bb.flush()
		defer rec.Release()
		if err := w.writeData(rec, meta, bs); err != nil {
			return err
		}
		sent += n
		if tick != nil {
			return tick()
		}
		return nil
	}
	// Fast path: a branch without filters whose projection names each
	// source column at most once is generated straight into the builders.
	fast := make(map[*branch]*builderSink)
	bds := make(map[*branch]bounds, len(p.rel.branches))
	for _, br := range p.rel.branches {
		bds[br] = br.blockBounds()
	}
	var flushErr error
	taken := uint64(0)       // rows the LIMIT has kept, before the post filters
	var seen map[string]bool // SELECT DISTINCT: the rows sent
	if p.rel.distinct {
		seen = map[string]bool{}
	}
	if limit == nil && seen == nil {
		for _, br := range p.rel.branches {
			if len(br.filters) > 0 && !bds[br].blockOnly {
				continue
			}
			bs := make([]array.Builder, br.table.schema.NumFields())
			ok := true
			for i, c := range br.cols {
				ok = ok && bs[c] == nil
				bs[c] = bb.b.Field(i)
			}
			if ok {
				fast[br] = &builderSink{bs: bs, onRow: func() {
					bb.rows++
					if bb.rows >= s.cfg.BatchRows && flushErr == nil {
						flushErr = flush()
					}
				}}
			}
		}
	}
	if len(p.rel.branches) == 1 && chain.replay != nil && !s.cfg.DictionaryStrings {
		if br := p.rel.branches[0]; fast[br] != nil && br.chain == chain && !br.unsynced && replayed(br.table) {
			return s.emitReplay(w, p, br, bds[br], e)
		}
	}
	for _, blk := range blocks {
		for _, br := range p.rel.branches {
			if br.chain != chain || br.unsynced || !bds[br].has(blk.Number) {
				continue
			}
			if fs := fast[br]; fs != nil {
				bb.b.Reserve(min(chain.rowCount(br.table, blk), s.cfg.BatchRows))
				chain.gen(br.table, blk, fs)
				if flushErr != nil {
					return sent, flushErr
				}
				continue
			}
			for _, r := range chain.rows(br.table, blk) {
				if !br.keep(r) {
					continue
				}
				if limit != nil && taken >= *limit {
					return sent, flush()
				}
				if seen != nil {
					k := distinctKey(r, br.cols)
					if seen[k] {
						continue
					}
					seen[k] = true
				}
				taken++
				if !br.keepPost(r) {
					continue
				}
				bb.add(r, br.cols)
				if bb.rows >= s.cfg.BatchRows {
					if err := flush(); err != nil {
						return sent, err
					}
				}
			}
		}
		if err := w.stream.Context().Err(); err != nil {
			return sent, err
		}
	}
	return sent, flush()
}

// emitReplay is emitBlocks for an unfiltered (or block-bounded) scan of one
// replayed table: the same batches, cut at the same rows, built as slices
// of the pre-built templates (see replay.go).
func (s *Server) emitReplay(w *streamWriter, p *plan, br *branch, bd bounds, e emitSpec) (int, error) {
	chain := e.chain
	em := &replayEmitter{rp: chain.replay, schema: p.schema, mem: s.cfg.Allocator,
		rb: chain.replay.batch(br.table, br.cols, p.schema, s.cfg.BatchRows)}
	bs := e.splitter()
	sent := 0
	flush := func() error {
		rec := em.flush()
		if rec == nil {
			return nil
		}
		n := int(rec.NumRows())
		err := w.writeData(rec, e.meta, bs)
		rec.Release()
		if err != nil {
			return err
		}
		sent += n
		if e.tick != nil {
			return e.tick()
		}
		return nil
	}
	for _, blk := range e.blocks {
		if !bd.has(blk.Number) {
			continue
		}
		rows := chain.replay.count(br.table, blk)
		for off := 0; off < rows; {
			n := min(rows-off, s.cfg.BatchRows-em.rows)
			em.add(blk, off, n)
			off += n
			if em.rows >= s.cfg.BatchRows {
				if err := flush(); err != nil {
					return sent, err
				}
			}
		}
		if err := w.stream.Context().Err(); err != nil {
			return sent, err
		}
	}
	return sent, flush()
}

// planChains returns the distinct chains of the plan, in order.
func planChains(p *plan) []*Chain {
	var out []*Chain
	for _, b := range p.rel.branches {
		found := false
		for _, c := range out {
			found = found || c == b.chain
		}
		if !found {
			out = append(out, b.chain)
		}
	}
	return out
}

// runBatch implements the batch sequence of §2.6.
func (s *Server) runBatch(ctx context.Context, w *streamWriter, p *plan) error {
	chains := planChains(p)
	ranges := []reorg.BlockRange{}
	type span struct {
		chain  *Chain
		blocks []*Block
	}
	var spans []span
	synced := true
	for _, b := range p.rel.branches {
		synced = synced && !b.unsynced
	}
	for _, c := range chains {
		head, ok := c.Head()
		if !ok {
			synced = false
			continue
		}
		bs := c.blocks(c.cfg.FirstBlock, head)
		if bs == nil {
			synced = false
			continue
		}
		spans = append(spans, span{chain: c, blocks: bs})
		ranges = append(ranges, c.rangeOf(bs[0], bs[len(bs)-1]))
	}
	if !synced {
		ranges = []reorg.BlockRange{}
	}
	meta := appMetadata(ranges, false)
	total := 0
	if p.rel.count {
		var n int64
		for _, sp := range spans {
			for _, blk := range sp.blocks {
				for _, br := range p.rel.branches {
					if br.chain != sp.chain || br.unsynced || !br.blockBounds().has(blk.Number) {
						continue
					}
					for _, r := range sp.chain.rows(br.table, blk) {
						if br.keep(r) {
							n++
						}
					}
				}
			}
		}
		bb := newBatchBuilder(s.cfg.Allocator, p.schema, 1)
		bb.b.Field(0).(*array.Int64Builder).Append(n)
		bb.rows = 1
		rec := bb.flush()
		err := w.write(rec, meta)
		rec.Release()
		bb.release()
		if err != nil {
			return err
		}
		total = 1
	} else {
		for _, sp := range spans {
			var limit *uint64
			if p.rel.limit != nil {
				l := *p.rel.limit - min(*p.rel.limit, uint64(total))
				limit = &l
			}
			n, err := s.emitBlocks(w, p, emitSpec{chain: sp.chain, blocks: sp.blocks, meta: meta, limit: limit, blockCol: -1})
			total += n
			if err != nil {
				return err
			}
		}
	}
	if total == 0 {
		if err := w.write(w.empty, meta); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return w.write(w.empty, appMetadata(ranges, true))
}

// runStream implements the streaming loop of §2.5 for one network.
func (s *Server) runStream(ctx context.Context, w *streamWriter, p *plan, t ticket) error {
	chains := planChains(p)
	for _, b := range p.rel.branches {
		if b.unsynced {
			return s.emptyStream(w)
		}
	}
	for _, c := range chains {
		if _, ok := c.Head(); !ok {
			return s.emptyStream(w)
		}
	}
	if len(chains) > 1 {
		return status.Error(codes.Internal, "streaming query execution error | Caused by: cross-network streaming is not supported: the query reads networks "+
			chains[0].Network()+" and "+chains[1].Network())
	}
	chain := chains[0]
	var prev *reorg.Point
	if t.HasCursor {
		pt, ok := t.Cursor[chain.Network()]
		if !ok {
			nets := make([]string, 0, len(t.Cursor))
			for n := range t.Cursor {
				nets = append(nets, n)
			}
			slices.Sort(nets)
			// Amp's exact status text (§3.2), which clients may match in logs.
			return status.Errorf(codes.Internal, "streaming query execution error | Caused by: failed to convert cursor -> expected cursor for network '%s', but cursor only contains networks: %v",
				chain.Network(), nets)
		}
		prev = &pt
	}
	st := &streamState{s: s, w: w}
	st.resetPeriodic()
	defer st.stopTimers()
	for {
		chain.mu.Lock()
		changed := chain.changed
		start, prevHash, ok := chain.nextStartLocked(prev)
		var head uint64
		if n := len(chain.canonical); n > 0 {
			head = chain.canonical[n-1].Number
		}
		chain.mu.Unlock()
		if !ok || start > head {
			if err := st.idle(ctx, changed); err != nil {
				return err
			}
			continue
		}
		end := min(head, start+s.cfg.MaxMicrobatchBlocks-1)
		capped := end < head
		blocks := chain.blocks(start, end)
		if blocks == nil || blocks[0].Parent != prevHash {
			// The chain changed between the two reads: recompute.
			continue
		}
		r := chain.rangeOf(blocks[0], blocks[len(blocks)-1])
		if err := st.microbatch(ctx, p, chain, blocks, r); err != nil {
			return err
		}
		last := blocks[len(blocks)-1]
		prev = &reorg.Point{Number: last.Number, Hash: last.Hash}
		if capped {
			continue
		}
		if err := st.idle(ctx, changed); err != nil {
			return err
		}
	}
}

// nextStartLocked computes the next microbatch start and its prev_hash
// (§2.5 step 2). ok is false when the start block is not available yet.
func (c *Chain) nextStartLocked(prev *reorg.Point) (start uint64, prevHash reorg.Hash, ok bool) {
	if len(c.canonical) == 0 {
		return 0, reorg.Hash{}, false
	}
	if prev == nil {
		first := c.canonical[0]
		return first.Number, first.Parent, true
	}
	if b := c.canonicalLocked(prev.Number); b != nil && b.Hash == prev.Hash {
		return prev.Number + 1, prev.Hash, true
	}
	base := prev.Number
	if b, known := c.all[prev.Hash]; known && b.Number == prev.Number {
		for b != nil {
			if cb := c.canonicalLocked(b.Number); cb != nil && cb.Hash == b.Hash {
				break
			}
			base = b.Number
			if b.Number == c.cfg.FirstBlock {
				break
			}
			b = c.all[b.Parent]
		}
	}
	base = max(base, c.cfg.FirstBlock)
	cb := c.canonicalLocked(base)
	if cb == nil {
		return base, reorg.Hash{}, false
	}
	return base, cb.Parent, true
}

func (s *Server) emptyStream(w *streamWriter) error {
	return w.write(w.empty, appMetadata(nil, true))
}

// streamState carries the keep-alive timers of one streaming DoGet.
type streamState struct {
	s        *Server
	w        *streamWriter
	periodic *time.Ticker
	current  []byte // metadata of the current/last microbatch's keep-alive
}

func (st *streamState) resetPeriodic() {
	if st.s.cfg.KeepAlive == KeepAlivePeriodicFromStart {
		st.periodic = time.NewTicker(st.s.cfg.KeepAliveInterval)
	}
}

func (st *streamState) stopTimers() {
	if st.periodic != nil {
		st.periodic.Stop()
	}
}

func (st *streamState) periodicC() <-chan time.Time {
	if st.periodic == nil {
		return nil
	}
	return st.periodic.C
}

func (st *streamState) keepAlive() error {
	if st.current == nil {
		return nil
	}
	return st.w.write(st.w.empty, st.current)
}

// idle waits for a chain change, sending periodic keep-alives if that
// policy is on.
func (st *streamState) idle(ctx context.Context, changed <-chan struct{}) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-st.s.stop:
			return status.Error(codes.Unavailable, "ampsim: server closing")
		case <-changed:
			return nil
		case <-st.periodicC():
			if err := st.keepAlive(); err != nil {
				return err
			}
		}
	}
}

// tick sends a periodic keep-alive if one is due (between data batches).
func (st *streamState) tick() error {
	select {
	case <-st.periodicC():
		return st.keepAlive()
	default:
		return nil
	}
}

// microbatch emits one microbatch (§2.2): optional keep-alives, data
// batches, exactly one 0-row completion batch.
func (st *streamState) microbatch(ctx context.Context, p *plan, chain *Chain, blocks []*Block, r reorg.BlockRange) error {
	cfg := st.s.cfg
	ranges := []reorg.BlockRange{r}
	meta := appMetadata(ranges, false)
	st.current = meta
	if err := st.w.sendSchema(); err != nil {
		return err
	}
	if cfg.KeepAlive == KeepAlivePerMicrobatch {
		if err := st.keepAlive(); err != nil {
			return err
		}
	}
	if cfg.MicrobatchDelay > 0 {
		if err := st.delay(ctx, cfg.MicrobatchDelay); err != nil {
			return err
		}
	}
	if _, err := st.s.emitBlocks(st.w, p, emitSpec{chain: chain, blocks: blocks, meta: meta, tick: st.tick, blockCol: p.blockNumCol}); err != nil {
		return err
	}
	return st.w.write(st.w.empty, appMetadata(ranges, true))
}

// delay simulates microbatch execution time with keep-alives per policy.
func (st *streamState) delay(ctx context.Context, d time.Duration) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	var perMB <-chan time.Time
	if st.s.cfg.KeepAlive == KeepAlivePerMicrobatch {
		t := time.NewTicker(st.s.cfg.KeepAliveInterval)
		defer t.Stop()
		perMB = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-st.s.stop:
			return status.Error(codes.Unavailable, "ampsim: server closing")
		case <-deadline.C:
			return nil
		case <-perMB:
			if err := st.keepAlive(); err != nil {
				return err
			}
		case <-st.periodicC():
			if err := st.keepAlive(); err != nil {
				return err
			}
		}
	}
}

// distinctKey identifies a row's projected values (cols), for DISTINCT.
func distinctKey(r row, cols []int) string {
	var b strings.Builder
	for _, c := range cols {
		fmt.Fprintf(&b, "%T:%v\x00", r[c], r[c])
	}
	return b.String()
}
