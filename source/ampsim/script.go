package ampsim

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// runScript sends a Script instead of the chain-driven stream.
func (s *Server) runScript(ctx context.Context, w *streamWriter, p *plan, sc Script) error {
	if err := w.sendSchema(); err != nil {
		return err
	}
	br := p.rel.branches[0]
	for i, b := range sc.Batches {
		meta := b.AppMetadata
		if meta == nil {
			meta = appMetadata(b.Ranges, b.Complete)
		} else if len(meta) == 0 {
			meta = nil
		}
		if b.Delay > 0 {
			if err := sleepCtx(ctx, b.Delay); err != nil {
				return err
			}
		}
		rec := s.syntheticBatch(p, br, b)
		err := w.write(rec, meta)
		rec.Release()
		if err != nil {
			return fmt.Errorf("sending scripted batch %d: %w", i, err)
		}
	}
	switch {
	case sc.Status != nil:
		return sc.Status
	case sc.Hang:
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stop:
			return status.Error(codes.Unavailable, "ampsim: server closing")
		}
	}
	return nil
}

// syntheticBatch builds Rows rows of the plan's schema whose block numbers
// come from the batch's first range.
func (s *Server) syntheticBatch(p *plan, br *branch, b ScriptedBatch) arrow.RecordBatch {
	bb := newBatchBuilder(s.cfg.Allocator, p.schema, b.Rows)
	defer bb.release()
	if b.Rows == 0 {
		return bb.flush()
	}
	cfg := br.chain.cfg
	cfg.TxPerBlock = max(cfg.TxPerBlock, 4)
	cfg.LogsPerTx = max(cfg.LogsPerTx, 2)
	var start, span uint64 = 0, 1
	var seed reorg.Hash
	if len(b.Ranges) > 0 {
		start, span, seed = b.Ranges[0].Start, b.Ranges[0].End-b.Ranges[0].Start+1, b.Ranges[0].Hash
	}
	for i := uint64(0); bb.rows < b.Rows && i < uint64(100*b.Rows+100); i++ {
		n := start + i%span
		blk := &Block{Number: n, Hash: br.chain.blockHash(1<<32+i, n, seed), Timestamp: cfg.GenesisTime.Add(time.Duration(n) * time.Second)}
		for _, r := range genRows(br.table, br.chain.sy, cfg, blk) {
			if bb.rows == b.Rows {
				break
			}
			bb.add(r, br.cols)
		}
	}
	return bb.flush()
}
