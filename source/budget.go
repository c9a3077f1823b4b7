package source

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
)

// readBudget bounds the bytes of Amp messages that a Client holds for all
// its streams and queries together ([Config.ReadAheadBytes]): from before
// a message is received until the consumer releases the envelope made of
// it.
//
// A stream learns the length of its next message from the message's
// prefix before it asks gRPC for it (sizeWatch), and reserves twice that
// (gRPC's frames, then the buffer they are copied into), waiting, in order
// of arrival, until it fits; gRPC's flow control holds Amp back meanwhile,
// at the stream's HTTP/2 window. Once the message is in, the reservation is
// trued up to the buffer it holds. So a stream that waits for room, or for
// Amp, holds nothing, and what the streams hold stays within the budget,
// but for a message larger than the whole budget (received alone) and a
// message whose length was not known (unsized: its stream had ended, or
// the Client could not follow its connection), counted once it is in.
//
// Everything held is given back without waiting for the budget (a
// consumer releases the envelope it has handled; a reservation ends when
// its message comes or its receive fails), so a waiter always gets its
// room in the end.
type readBudget struct {
	total int64
	// unsized is the bytes of messages counted only once they were in,
	// their length not known before.
	unsized atomic.Int64

	mu      sync.Mutex
	held    int64
	waiters list.List // of *budgetWaiter, in order of arrival
}

// budgetWaiter is one acquire waiting for room.
type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed when the room is granted
}

// newReadBudget returns a budget of total bytes; nil (no bound) when total
// is 0.
func newReadBudget(total int64) *readBudget {
	if total <= 0 {
		return nil
	}
	return &readBudget{total: total}
}

// acquire waits until n bytes fit in the budget, after every earlier
// waiter, and reserves them. n is at most the whole budget (a message
// larger than the budget is received alone); acquire returns what it
// reserved.
func (b *readBudget) acquire(ctx context.Context, n int64) (int64, error) {
	n = min(max(n, 0), b.total)
	if n == 0 {
		return 0, nil
	}
	b.mu.Lock()
	if b.waiters.Len() == 0 && b.held+n <= b.total {
		b.held += n
		b.mu.Unlock()
		return n, nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	e := b.waiters.PushBack(w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-w.ready:
			// Granted meanwhile: give it back.
			b.held -= n
		default:
			b.waiters.Remove(e)
		}
		b.grant()
		b.mu.Unlock()
		return 0, ctx.Err()
	}
}

// force counts n bytes at once, whether or not they fit: a message that
// is already in memory.
func (b *readBudget) force(n int64) {
	if n > 0 {
		b.mu.Lock()
		b.held += n
		b.mu.Unlock()
	}
}

// release gives back n bytes that acquire or force counted.
func (b *readBudget) release(n int64) {
	if n > 0 {
		b.mu.Lock()
		b.held -= n
		b.grant()
		b.mu.Unlock()
	}
}

// grant serves the waiters in order while the first fits. b.mu is held.
func (b *readBudget) grant() {
	for e := b.waiters.Front(); e != nil; e = b.waiters.Front() {
		w := e.Value.(*budgetWaiter)
		if b.held+w.n > b.total {
			return
		}
		b.held += w.n
		b.waiters.Remove(e)
		close(w.ready)
	}
}

// Held returns what the budget's holders hold now.
func (b *readBudget) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// reservation is what one stream holds of a readBudget: the message it is
// about to receive, then the record batch message it received and has not
// yet handed on (take), then, as charges, the envelopes its consumer has
// not yet released. close gives back every
// charge still outstanding, so that a consumer that never releases an
// envelope holds the budget only as long as its stream lives.
type reservation struct {
	b *readBudget
	// pending is counted for the record batch message received since the
	// last take.
	pending int64

	mu          sync.Mutex
	outstanding map[*charge]struct{}
	closed      bool
}

func newReservation(b *readBudget) *reservation {
	if b == nil {
		return nil
	}
	return &reservation{b: b, outstanding: map[*charge]struct{}{}}
}

// receive reserves room for the next message once sizes tells its
// length (twice it: while a message is received, gRPC holds its frames,
// and the codec then copies them into the message's one buffer), calls
// recv and trues the reservation up to the size of what it returned
// (size: the bytes the message holds in memory), which it returns as
// counted. A message whose length sizes does not know is counted once it
// is in. A nil reservation just calls recv. On an error nothing stays
// counted.
func receive[T any](ctx context.Context, r *reservation, sizes *callSizes, recv func() (T, error), size func(T) int64) (T, int64, error) {
	if r == nil {
		m, err := recv()
		return m, 0, err
	}
	n, known, err := sizes.next(ctx)
	var reserved int64
	if err == nil && known {
		reserved, err = r.b.acquire(ctx, 2*n)
	}
	if err != nil {
		var zero T
		return zero, 0, err
	}
	m, err := recv()
	if err != nil {
		r.b.release(reserved)
		return m, 0, err
	}
	got := size(m)
	switch {
	case got <= reserved:
		r.b.release(reserved - got)
	case known: // larger than the whole budget
		r.b.force(got - reserved)
	default:
		r.b.force(got)
		r.b.unsized.Add(got)
	}
	return m, got, nil
}

// hold keeps n counted bytes of a record batch's message for the next
// take.
func (r *reservation) hold(n int64) {
	if r != nil {
		r.pending += n
	}
}

// take hands what is pending to a charge, which the envelope built from
// the message carries until it is released; nil when nothing is pending.
func (r *reservation) take() *charge {
	if r == nil || r.pending == 0 {
		return nil
	}
	c := &charge{r: r, n: r.pending}
	r.pending = 0
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		r.b.release(c.n)
		return nil
	}
	r.outstanding[c] = struct{}{}
	return c
}

// giveBack returns n counted bytes of a message that no envelope carries.
func (r *reservation) giveBack(n int64) {
	if r != nil {
		r.b.release(n)
	}
}

// drop gives back what is pending (a DoGet stream that ended between a
// message and its record).
func (r *reservation) drop() {
	if r != nil {
		r.b.release(r.pending)
		r.pending = 0
	}
}

// close gives back every outstanding charge and what is pending: the
// stream is closed, and an envelope its consumer still holds no longer
// counts.
func (r *reservation) close() {
	if r == nil {
		return
	}
	r.drop()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for c := range r.outstanding {
		if c.done.CompareAndSwap(false, true) {
			r.b.release(c.n)
		}
	}
	clear(r.outstanding)
}

// charge is the part of the budget that one envelope holds until it is
// released.
type charge struct {
	r    *reservation
	n    int64
	done atomic.Bool
}

// release gives the charge back to the budget; later calls do nothing.
func (c *charge) release() {
	if c == nil || !c.done.CompareAndSwap(false, true) {
		return
	}
	c.r.b.release(c.n)
	c.r.mu.Lock()
	delete(c.r.outstanding, c)
	c.r.mu.Unlock()
}
