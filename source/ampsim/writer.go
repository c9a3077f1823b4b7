package ampsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// streamWriter writes one DoGet's FlightData: the schema once, dictionary
// batches without app_metadata, record batches with it (§2.1, §2.4).
type streamWriter struct {
	s      *Server
	stream flight.FlightService_DoGetServer
	schema *arrow.Schema
	ipcw   *ipc.Writer
	meta   []byte // app_metadata of the record batch being written
	sent   bool   // schema sent
	nbatch int    // record batch messages sent
	fault  *Fault
	empty  arrow.RecordBatch
	closed bool // drop payloads written by Close
}

func (s *Server) newStreamWriter(stream flight.FlightService_DoGetServer, schema *arrow.Schema) *streamWriter {
	w := &streamWriter{s: s, stream: stream, schema: schema}
	w.ipcw = ipc.NewWriterWithPayloadWriter(payloadWriterFunc(w.writePayload), ipc.WithSchema(schema), ipc.WithAllocator(s.cfg.Allocator))
	b := array.NewRecordBuilder(s.cfg.Allocator, schema)
	w.empty = b.NewRecordBatch()
	b.Release()
	return w
}

func (w *streamWriter) release() {
	w.closed = true
	_ = w.ipcw.Close()
	w.empty.Release()
}

type payloadWriterFunc func(ipc.Payload) error

func (f payloadWriterFunc) Start() error                     { return nil }
func (f payloadWriterFunc) WritePayload(p ipc.Payload) error { return f(p) }
func (f payloadWriterFunc) Close() error                     { return nil }

func (w *streamWriter) writePayload(p ipc.Payload) error {
	if w.closed {
		return nil
	}
	meta := p.Meta()
	defer meta.Release()
	msg := ipc.NewMessage(meta, memory.NewBufferBytes(nil))
	typ := msg.Type()
	msg.Release()
	out := &flightOut{header: meta.Bytes(), pool: &w.s.bodies}
	switch typ {
	case ipc.MessageSchema:
		if w.sent {
			return nil
		}
		w.sent = true
	case ipc.MessageRecordBatch:
		out.appMetadata = w.meta
	case ipc.MessageNone, ipc.MessageDictionaryBatch, ipc.MessageTensor, ipc.MessageSparseTensor:
		// Sent as they are, without app_metadata.
	}
	// The body goes out in a buffer of its own (serverCodec), which gRPC
	// returns to the pool once it has written it.
	out.body = w.s.bodies.Get(0)
	if err := p.SerializeBody(&bodyWriter{buf: out.body}); err != nil {
		w.s.bodies.Put(out.body)
		return fmt.Errorf("serializing body: %w", err)
	}
	return w.stream.SendMsg(out)
}

// sendSchema sends the schema message now (at the first microbatch start).
func (w *streamWriter) sendSchema() error {
	if w.sent {
		return nil
	}
	var hdr []byte
	cw := ipc.NewWriterWithPayloadWriter(payloadWriterFunc(func(p ipc.Payload) error {
		m := p.Meta()
		hdr = append([]byte(nil), m.Bytes()...)
		m.Release()
		return nil
	}), ipc.WithSchema(w.schema), ipc.WithAllocator(w.s.cfg.Allocator))
	if err := cw.Close(); err != nil {
		return fmt.Errorf("encoding schema: %w", err)
	}
	w.sent = true
	return w.stream.Send(&flight.FlightData{DataHeader: hdr})
}

// metadata returns the app_metadata JSON {"ranges":…,"ranges_complete":…}.
func appMetadata(ranges []reorg.BlockRange, complete bool) []byte {
	if ranges == nil {
		ranges = []reorg.BlockRange{}
	}
	rb, err := json.Marshal(ranges)
	if err != nil {
		panic(err) // BlockRange always marshals
	}
	out := make([]byte, 0, len(rb)+40)
	out = append(out, `{"ranges":`...)
	out = append(out, rb...)
	out = append(out, `,"ranges_complete":`...)
	out = strconv.AppendBool(out, complete)
	return append(out, '}')
}

// write sends one record batch (split into ~MaxFlightDataBytes slices, each
// with the same metadata). It fires the queued fault first if due.
func (w *streamWriter) write(rec arrow.RecordBatch, meta []byte) error {
	return w.writeSized(rec, meta, batchBytes(rec))
}

// writeData sends one data batch of a microbatch as Amp does: cut at a
// block boundary per bs (nil: not cut), then each part split as write
// splits it. Amp sizes the split of a part by the buffers it holds, which
// are the whole batch's (its slices keep them, arrow-rs#3407), so both
// parts of a cut batch are sized as the batch.
func (w *streamWriter) writeData(rec arrow.RecordBatch, meta []byte, bs *blockSplitter) error {
	size := batchBytes(rec)
	k := bs.cut(rec)
	if k == 0 {
		return w.writeSized(rec, meta, size)
	}
	for _, r := range [][2]int64{{0, int64(k)}, {int64(k), rec.NumRows()}} {
		sl := rec.NewSlice(r[0], r[1])
		err := w.writeSized(sl, meta, size)
		sl.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// writeSized is write for a batch whose buffers Amp would count as size
// bytes: n = ceil(size / MaxFlightDataBytes) slices of rows/n rows each
// (flight.rs split_batch_for_grpc_response).
func (w *streamWriter) writeSized(rec arrow.RecordBatch, meta []byte, size int) error {
	if err := w.sendSchema(); err != nil {
		return err
	}
	rows := int(rec.NumRows())
	if rows == 0 {
		return w.writeOne(rec, meta)
	}
	maxBytes := w.s.cfg.MaxFlightDataBytes
	n := max(1, (size+maxBytes-1)/maxBytes)
	per := max(1, rows/n)
	if per >= rows {
		return w.writeOne(rec, meta)
	}
	for off := 0; off < rows; off += per {
		sl := rec.NewSlice(int64(off), int64(min(off+per, rows)))
		err := w.writeOne(sl, meta)
		sl.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

func (w *streamWriter) writeOne(rec arrow.RecordBatch, meta []byte) error {
	if err := w.checkFault(); err != nil {
		return err
	}
	w.meta = meta
	err := w.ipcw.Write(rec)
	w.meta = nil
	if err != nil {
		return fmt.Errorf("writing batch: %w", err)
	}
	w.nbatch++
	return nil
}

func (w *streamWriter) checkFault() error {
	f := w.fault
	if f == nil || w.nbatch < f.AfterBatches {
		return nil
	}
	w.fault = nil
	switch {
	case f.Status != nil:
		return f.Status
	case f.Disconnect:
		w.disconnect()
		return status.Error(codes.Unavailable, "ampsim: connection dropped by fault injection")
	case f.Delay > 0:
		return sleepCtx(w.stream.Context(), f.Delay)
	}
	return nil
}

func (w *streamWriter) disconnect() {
	p, ok := peer.FromContext(w.stream.Context())
	if !ok {
		return
	}
	s := w.s
	s.mu.Lock()
	var victims []net.Conn
	for c := range s.conns {
		if c.RemoteAddr().String() == p.Addr.String() {
			victims = append(victims, c)
		}
	}
	s.mu.Unlock()
	for _, c := range victims {
		_ = c.Close()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// batchBuilder accumulates projected rows into record batches.
type batchBuilder struct {
	b    *array.RecordBuilder
	rows int
}

func newBatchBuilder(mem memory.Allocator, schema *arrow.Schema, reserve int) *batchBuilder {
	b := array.NewRecordBuilder(mem, schema)
	if reserve > 0 {
		b.Reserve(reserve)
	}
	return &batchBuilder{b: b}
}

func (bb *batchBuilder) add(r row, cols []int) {
	for i, c := range cols {
		appendValue(bb.b.Field(i), r[c])
	}
	bb.rows++
}

func (bb *batchBuilder) flush() arrow.RecordBatch {
	bb.rows = 0
	return bb.b.NewRecordBatch()
}

func (bb *batchBuilder) release() { bb.b.Release() }

func appendValue(b array.Builder, v any) {
	if v == nil {
		b.AppendNull()
		return
	}
	switch b := b.(type) {
	case *array.Uint64Builder:
		b.Append(v.(uint64))
	case *array.Uint32Builder:
		b.Append(v.(uint32))
	case *array.Int32Builder:
		b.Append(v.(int32))
	case *array.Int64Builder:
		b.Append(v.(int64))
	case *array.BooleanBuilder:
		b.Append(v.(bool))
	case *array.StringBuilder:
		b.Append(v.(string))
	case *array.BinaryDictionaryBuilder:
		if err := b.AppendString(v.(string)); err != nil {
			panic(err)
		}
	case *array.BinaryBuilder:
		b.Append(v.([]byte))
	case *array.FixedSizeBinaryBuilder:
		b.Append(v.([]byte))
	case *array.Decimal128Builder:
		b.Append(v.(decimal128.Num))
	case *array.TimestampBuilder:
		b.Append(v.(arrow.Timestamp))
	case *array.ListBuilder:
		b.Append(true)
		vb := b.ValueBuilder()
		for _, e := range v.([]any) {
			appendValue(vb, e)
		}
	case *array.StructBuilder:
		b.Append(true)
		for i, e := range v.([]any) {
			appendValue(b.FieldBuilder(i), e)
		}
	default:
		panic(fmt.Sprintf("ampsim: no appender for %T", b))
	}
}
