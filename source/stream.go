package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// Kind says what an Envelope carries.
type Kind uint8

const (
	// KindBatch is a record batch with its block ranges: data (rows > 0,
	// Complete false), a keep-alive (0 rows, Complete false) or the
	// microbatch's completion (0 rows, Complete true).
	KindBatch Kind = iota + 1
	// KindReconnect marks that the previous DoGet stream ended and the
	// source is about to open a new one. Everything after it comes from the
	// new stream. It carries no batch.
	KindReconnect
)

// String returns "batch" or "reconnect".
func (k Kind) String() string {
	switch k {
	case KindBatch:
		return "batch"
	case KindReconnect:
		return "reconnect"
	default:
		return fmt.Sprintf("Kind(%d)", uint8(k))
	}
}

// Envelope is one item of a Stream: a record batch with its block ranges, or
// a reconnect marker.
type Envelope struct {
	// Kind is KindBatch or KindReconnect.
	Kind Kind
	// Batch is the record batch (KindBatch only), possibly with 0 rows. The
	// caller owns one reference and must Release it (or call
	// Envelope.Release). It shares memory with the received gRPC message:
	// no row was copied.
	Batch arrow.RecordBatch
	// Ranges are the batch's block ranges from app_metadata.
	Ranges []reorg.BlockRange
	// Complete is ranges_complete: this batch completes the ranges (the
	// watermark; always 0 rows).
	Complete bool
	// Index is the position of the record batch in its DoGet stream, 0 for
	// the first batch after the schema.
	Index int
	// Cause is, for KindReconnect, the error that ended the previous stream
	// (io.EOF when the server ended it normally).
	Cause error
	// Attempt is, for KindReconnect, the number of consecutive failed
	// attempts so far (1 for the first reconnect after a healthy stream).
	Attempt int

	// held is the part of the Client's read budget that the batch's
	// messages hold until Release (nil: none).
	held *charge
	// body is the pooled buffer of the batch's message, given back at
	// Release (nil: none).
	body *pooledBody
}

// KeepAlive reports whether e is a 0-row batch that does not complete its
// ranges: Amp's keep-alive (or an empty data batch). It is never the end of
// the stream and never a reorg on its own, but it does carry the current
// microbatch's range, which the reorg validation must see.
func (e Envelope) KeepAlive() bool {
	return e.Kind == KindBatch && !e.Complete && (e.Batch == nil || e.Batch.NumRows() == 0)
}

// Release releases the batch, if any, and clears it, and gives the
// memory of its Amp messages back to the Client's read budget
// ([Config.ReadAheadBytes]). It is safe to call on any envelope, and on
// copies of one, more than once. Release every envelope before waiting
// for anything but Amp: until then it counts against the budget that
// every stream of the Client shares. After Release nothing may read the
// batch or anything taken from it without a copy (a string or []byte
// Value of an array, a slice, a record built on its columns): the
// message's memory goes back to the Client for the next message.
func (e *Envelope) Release() {
	if e.Batch != nil {
		e.Batch.Release()
		e.Batch = nil
	}
	e.held.release()
	e.held = nil
	e.body.release()
	e.body = nil
}

// Stream reads one Amp query. It is created by Client.Stream or
// Client.Query. Next is meant for a single consumer goroutine; Close may be
// called from any goroutine.
type Stream struct {
	c         *Client
	sql       string
	streaming bool
	cursor    func() reorg.Cursor
	log       *slog.Logger
	// onRetry, when set, is told of every failed attempt before its
	// backoff (WithRetryHook).
	onRetry func(err error, attempt int)

	items   chan Envelope
	res     *reservation  // the stream's part of the Client's read budget; nil: no bound
	resume  chan struct{} // Next → run: the reconnect marker was consumed
	cancel  context.CancelFunc
	done    chan struct{} // closed when run returns; runErr is set before
	runErr  error
	lastErr error // owned by run: the error of the last failed attempt

	closeOnce sync.Once
	closed    chan struct{}

	// Consumer side, touched only by Next.
	ackPending bool
	final      error
}

// Stream starts a streaming query (amp-stream: true) that runs until ctx is
// cancelled, Close is called or a permanent error occurs; Amp never ends a
// streaming query by itself.
//
// cursor is called before every GetFlightInfo and must return the
// consumer's committed resume position at that moment, or nil/empty to start
// from the earliest block. The first call happens in Stream itself; later
// ones run on the stream's goroutine, so cursor must be safe to call
// concurrently with the consumer (read a mutex-guarded or atomic value).
// After a reconnect marker, cursor is called only once the consumer has
// received the KindReconnect envelope and called Next again. A non-empty
// cursor is validated before it is sent (the server silently ignores an
// invalid one and restarts from block 0): an invalid first cursor is
// returned by Stream, a later one ends the stream with a permanent error.
//
// ctx bounds the whole life of the stream, like the context of a gRPC
// streaming call: cancelling it stops the reader at once and Next returns
// ctx.Err().
func (c *Client) Stream(ctx context.Context, sql string, cursor func() reorg.Cursor, opts ...StreamOption) (*Stream, error) {
	if cursor == nil {
		return nil, errors.New("source: Stream needs a cursor function; return nil from it to start at the earliest block")
	}
	return c.open(ctx, sql, true, cursor, opts)
}

// StreamOption configures one Stream or Query of a Client.
type StreamOption func(*Stream)

// WithLogger makes the stream or query log to l instead of the client's
// logger (Deps.Logger). A Client is shared by every stream of a process, so
// only the caller can say which stream a reconnect warning belongs to: pass
// the stream's logger, carrying its id. A nil l keeps the client's logger.
func WithLogger(l *slog.Logger) StreamOption {
	return func(s *Stream) {
		if l != nil {
			s.log = l
		}
	}
}

// WithRetryHook makes the stream call fn with the error and the count of
// consecutive failures each time an attempt failed and it is about to back
// off and reconnect, whether or not a KindReconnect envelope follows (a
// reconnect that fails before any envelope of the new stream was read,
// e.g. a GetFlightInfo to an Amp that stopped answering, produces none).
// fn runs on the stream's goroutine and must not block.
func WithRetryHook(fn func(err error, attempt int)) StreamOption {
	return func(s *Stream) { s.onRetry = fn }
}

// Query starts a batch (non-streaming) query, sending amp-stream: false so
// that even SQL with SETTINGS stream = true runs as a batch. Its envelopes
// are the result batches and then one 0-row Complete envelope whose ranges
// are the synced ranges of the queried tables (amp-protocol.md §2.6); after
// it Next returns io.EOF.
//
// Failures before the first envelope are retried like a stream's; a failure
// after data was delivered ends the query with that error (IsRetryable tells
// whether running it again may help), since a re-run would repeat rows. An
// end of stream without the Complete envelope is ErrIncomplete.
func (c *Client) Query(ctx context.Context, sql string, opts ...StreamOption) (*Stream, error) {
	return c.open(ctx, sql, false, nil, opts)
}

func (c *Client) open(ctx context.Context, sql string, streaming bool, cursor func() reorg.Cursor, opts []StreamOption) (*Stream, error) {
	if _, err := descriptor(sql); err != nil {
		return nil, err
	}
	var first reorg.Cursor
	if streaming {
		first = cursor()
		if err := validateCursor(first); err != nil {
			return nil, err
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	s := &Stream{
		c: c, sql: sql, streaming: streaming, cursor: cursor, log: c.log,
		items:  make(chan Envelope, c.cfg.ReadAhead),
		res:    newReservation(c.budget),
		resume: make(chan struct{}, 1),
		cancel: cancel,
		done:   make(chan struct{}),
		closed: make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	go s.run(rctx, first)
	return s, nil
}

// Next returns the next envelope, waiting for at most ctx. The caller owns
// the returned batch and must Release it.
//
// Reconnects are visible: after a streaming query's DoGet fails (or ends)
// with a retryable error, Next first returns the envelopes already read from
// it, then one KindReconnect envelope, then the envelopes of the new stream.
// The consumer must roll back to its committed position when it sees the
// marker; the source calls the cursor function only when Next is called
// after the marker, so the new stream resumes from the rolled-back position.
// No marker is returned when a failed attempt delivered nothing since the
// previous one.
//
// Errors: a permanent error (errors.Is(err, ErrPermanent)), ErrRetriesExhausted,
// io.EOF at the end of a batch query, ErrIncomplete, the stream context's
// error once it is cancelled, or ErrClosed after Close. Once Next returned an
// error it returns the same error again. A ctx error of Next's own ctx is
// returned without ending the stream.
func (s *Stream) Next(ctx context.Context) (Envelope, error) {
	select {
	case <-s.closed:
		return Envelope{}, ErrClosed
	default:
	}
	if s.final != nil {
		return Envelope{}, s.final
	}
	if s.ackPending {
		s.ackPending = false
		s.resume <- struct{}{} // capacity 1, and run consumes each token before the next marker
	}
	select {
	case env := <-s.items:
		return s.take(env), nil
	case <-s.done:
		// run ended; buffered items come first unless the stream was
		// cancelled, which stops at once.
		if !isContextErr(s.runErr) {
			select {
			case env := <-s.items:
				return s.take(env), nil
			default:
			}
		}
		s.final = s.runErr
		return Envelope{}, s.final
	case <-s.closed:
		return Envelope{}, ErrClosed
	case <-ctx.Done():
		return Envelope{}, ctx.Err()
	}
}

func (s *Stream) take(env Envelope) Envelope {
	if env.Kind == KindReconnect {
		s.ackPending = true
	}
	return env
}

// Close stops the reader, waits for its goroutine and the gRPC stream to
// finish, and releases every envelope not yet returned by Next. The
// envelopes that Next returned stop counting against the Client's read
// budget (their batches stay valid until released). It is idempotent and
// always returns nil.
func (s *Stream) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.cancel()
		<-s.done
		defer s.res.close()
		for {
			select {
			case env := <-s.items:
				env.Release()
			default:
				return
			}
		}
	})
	return nil
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// run owns the reader goroutine: it opens DoGet streams until a terminal
// error and records that error for Next.
func (s *Stream) run(ctx context.Context, first reorg.Cursor) {
	defer close(s.done)
	err := s.loop(ctx, first)
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	s.runErr = err
}

// attemptResult is what one GetFlightInfo+DoGet attempt produced.
type attemptResult struct {
	queued   bool // at least one envelope was queued
	progress bool // at least one envelope with block ranges was queued
	complete bool // the last queued envelope completed its ranges
}

func (s *Stream) loop(ctx context.Context, first reorg.Cursor) error {
	cfg := s.c.cfg.Backoff
	failures := 0        // consecutive attempts without progress
	sinceMarker := false // an envelope was queued since the last marker
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if sinceMarker {
				// The marker goes after everything already queued; the
				// consumer must see it (and roll back) before the cursor
				// for the next attempt is read.
				if err := s.push(ctx, Envelope{Kind: KindReconnect, Cause: s.lastErr, Attempt: failures}); err != nil {
					return err
				}
				select {
				case <-s.resume:
				case <-ctx.Done():
					return ctx.Err()
				}
				sinceMarker = false
			}
			d := cfg.delay(failures, s.c.rand())
			s.log.LogAttrs(ctx, slog.LevelWarn, "amp stream failed; reconnecting",
				slog.String("error", s.lastErr.Error()), slog.Int("attempt", failures), slog.Duration("backoff", d))
			if s.onRetry != nil {
				s.onRetry(s.lastErr, failures)
			}
			select {
			case <-s.c.clock.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		cur := first
		if s.streaming && attempt > 0 {
			cur = s.cursor()
			if err := validateCursor(cur); err != nil {
				return err
			}
		}
		res, err := s.attempt(ctx, cur)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sinceMarker = sinceMarker || res.queued
		if !s.streaming {
			switch {
			case errors.Is(err, io.EOF) && res.complete:
				return io.EOF
			case errors.Is(err, io.EOF):
				return ErrIncomplete
			case res.queued || !IsRetryable(err):
				return err
			}
		} else if !IsRetryable(err) {
			return err
		}
		if res.progress {
			failures = 0
		}
		failures++
		s.lastErr = err
		if cfg.MaxAttempts > 0 && failures >= cfg.MaxAttempts {
			return fmt.Errorf("%w after %d attempts: %w", ErrRetriesExhausted, failures, err)
		}
	}
}

// validateCursor checks a non-empty cursor from the caller; an empty one
// means "from the earliest block" and is not sent.
func validateCursor(cur reorg.Cursor) error {
	if len(cur) == 0 {
		return nil
	}
	if err := cur.Validate(); err != nil {
		return &permanentError{fmt.Errorf("source: validating the resume cursor from the caller: %w", err)}
	}
	return nil
}

// attempt runs one GetFlightInfo + DoGet and queues its envelopes. It
// returns the error that ended the DoGet stream; io.EOF for a normal end.
func (s *Stream) attempt(ctx context.Context, cur reorg.Cursor) (res attemptResult, err error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the gRPC stream and its goroutines on every return
	info, err := s.c.flightInfo(actx, s.sql, s.streaming, cur)
	if err != nil {
		return res, err
	}
	tk, err := ticket(info)
	if err != nil {
		return res, err
	}
	codec := &flightDataCodec{pool: s.c.bodies}
	// With a read budget, the call's messages are sized before they are
	// received (sizeWatch); without one nothing would take the sizes.
	var sizes *callSizes
	var tag []string
	if s.res != nil {
		sizes = s.c.sizes.track()
		defer sizes.close()
		tag = []string{headerCall, sizes.tag}
	}
	st, err := s.c.svc.DoGet(s.c.withAuth(actx, tag...), tk, doGetCodec(codec))
	if err != nil {
		return res, s.c.callError("DoGet", err)
	}
	mr := &messageReader{ctx: actx, stream: st, codec: codec, res: s.res, sizes: sizes}
	defer s.res.drop() // messages received for a record that never came
	// The reader blocks until the schema arrives, which Amp sends only
	// with the first microbatch; cancelling actx unblocks it.
	rdr, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(s.c.mem))
	if err != nil {
		return res, s.c.callError("DoGet", err)
	}
	defer rdr.Release()
	// Amp repeats one microbatch's app_metadata on each of its batches
	// (one per block with _block_num selected): parse it once per
	// distinct value, not once per message.
	var lastRaw []byte
	var last AppMetadata
	for idx := 0; rdr.Next(); idx++ {
		rec := rdr.RecordBatch()
		raw := mr.meta
		md := last
		if lastRaw == nil || !bytes.Equal(raw, lastRaw) {
			var err error
			if md, err = ParseAppMetadata(raw); err != nil {
				var me *MetadataError
				if errors.As(err, &me) {
					me.Index = idx
				}
				return res, err
			}
			// raw is part of the message's buffer: cloned, so that the
			// cache does not keep the message alive.
			lastRaw, last = append(lastRaw[:0], raw...), md
		}
		// Every envelope gets its own Ranges: consumers may keep them.
		md.Ranges = slices.Clone(md.Ranges)
		rec.Retain() // the reader releases its reference on the next Next
		env := Envelope{Kind: KindBatch, Batch: rec, Ranges: md.Ranges, Complete: md.Complete, Index: idx, held: s.res.take(), body: mr.body}
		if md.Complete && rec.NumRows() > 0 {
			// Amp never sends this; deliver the rows, then the watermark,
			// rather than lose them (amp-protocol.md §5.1 recommendation).
			s.log.LogAttrs(ctx, slog.LevelWarn, "amp sent a ranges_complete batch with rows; yielding them as data before the watermark",
				slog.Int("batch", idx), slog.Int64("rows", rec.NumRows()))
			wm := Envelope{Kind: KindBatch, Batch: rec.NewSlice(0, 0), Ranges: slices.Clone(md.Ranges), Complete: true, Index: idx}
			env.Complete = false
			if err := s.push(ctx, env); err != nil {
				wm.Release()
				return res, err
			}
			env = wm
		}
		if err := s.push(ctx, env); err != nil {
			return res, err
		}
		res.queued = true
		res.progress = res.progress || len(md.Ranges) > 0
		res.complete = md.Complete
	}
	if err := rdr.Err(); err != nil {
		return res, s.c.callError("DoGet", err)
	}
	return res, io.EOF
}

// push queues env for Next, waiting for room in the read-ahead window
// (ReadAhead envelopes). On failure env is released.
func (s *Stream) push(ctx context.Context, env Envelope) error {
	select {
	case s.items <- env:
		return nil
	case <-ctx.Done():
		env.Release()
		return ctx.Err()
	}
}
