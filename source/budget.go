package source

import (
	"container/list"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ampMessageBytes is the size Amp aims each FlightData at
// (GRPC_TARGET_MAX_FLIGHT_SIZE_BYTES, amp-protocol.md §2.4): a stream's
// first estimate until the Client has received a message.
const ampMessageBytes = 2 << 20

// minEstimate is the least a stream reserves before it receives.
const minEstimate = 4 << 10

// idleRelease is how long a stream keeps its reservation, while others
// wait for room, before it gives it back: a stream waiting for the first
// answer to its query, or for a block of a chain that stalled in the
// middle of a microbatch, must not keep the others from receiving. It is long enough that a message that
// is arriving, slowly on a loaded machine, is rarely taken for none.
const idleRelease = time.Second

// readBudget bounds the bytes of Amp messages that a Client holds for all
// its streams and queries together ([Config.ReadAheadBytes]): from before
// a record batch's message is received until the consumer releases the
// envelope made of it.
//
// A stream reserves twice its estimate of its next message before it asks
// gRPC for it (its frames, then the buffer they are copied into; waiting,
// in order of arrival, until the reservation fits), so that a stream that
// waits for room holds no message, and gRPC's flow control holds Amp back
// meanwhile. Once the message is in, the reservation is trued up to its
// size without waiting: the memory is there, and counting it makes the
// others wait. A stream whose message has not come within idle while
// others wait for room gives its reservation back (it waits for the
// first answer to its query, or for a block of a chain that stalled); the
// message that comes later is
// counted when it comes. So what is held can exceed the budget by the
// part of one message per stream that its reservation did not cover.
//
// A stream holds nothing while it waits for room, and everything held is
// given back without waiting for the budget (a consumer releases the
// envelope it has handled; a reservation ends when its message comes or
// after idle), so a waiter always gets its room in the end.
//
// What it does not bound: once a stream asks gRPC for a message, gRPC
// widens the stream's HTTP/2 window to the message's size and receives it
// whole, so the frames of the messages that streams are receiving on a
// reservation smaller than the message (after a microbatch's end) or given
// back count only once the message is in. With 100 streams that start a
// catch-up at the same moment on two cores, they were 116 MB of the 234 MB
// live heap at the peak of the worst run seen. Tried and dropped: keeping
// what idle streams give back within the budget starved the other streams
// while those that had caught up waited at the head of their chain with
// their reservations, until their transactions timed out; keeping the
// estimate after a microbatch of a backlog made that run 1.8 times slower
// without lowering its peak, each stream that caught up keeping the
// others waiting for idle; a tenth of idle after such a microbatch, or
// ten times idle in the middle of a microbatch, did not lower the peak
// either. amp_bridge_amp_read_over_bytes_total{cause} shows both ways.
type readBudget struct {
	total int64
	idle  time.Duration
	// largest is the largest message the Client received lately: a new
	// stream's first estimate.
	largest atomic.Int64
	// overEstimate and overIdle are the bytes of messages counted only
	// once they were in (force), beyond their streams' reservations: the
	// message was larger than its stream's estimate, or the stream had
	// given its reservation back. givenBack is how many streams wait for
	// a message after giving theirs back.
	overEstimate, overIdle, givenBack atomic.Int64

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
	b := &readBudget{total: total, idle: idleRelease}
	b.largest.Store(ampMessageBytes)
	return b
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

// seen records a message of n bytes for the estimates of new streams: the
// largest lately, decaying by an eighth with each smaller message.
func (b *readBudget) seen(n int64) {
	for {
		old := b.largest.Load()
		next := max(n, old-old/8, minEstimate)
		if next == old || b.largest.CompareAndSwap(old, next) {
			return
		}
	}
}

// reservation is what one stream holds of a readBudget: the estimate of
// the message it is about to receive, then the record batch message it
// received and has not yet handed on (take), then, as charges, the
// envelopes its consumer has not yet released. close gives back every
// charge still outstanding, so that a consumer that never releases an
// envelope holds the budget only as long as its stream lives.
type reservation struct {
	b *readBudget
	// recent are the sizes of the last record batch messages of the
	// current microbatch (a ring, next is where the next one goes): the
	// next one's estimate is the largest of them. After a microbatch's
	// last message (boundary) the next is estimated small: a stream at
	// the head of its chain waits for a block there, holding next to
	// nothing, and a stream that catches up has the first message of its
	// next microbatch counted when it comes.
	recent [4]int64
	next   int
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
	r := &reservation{b: b, outstanding: map[*charge]struct{}{}}
	r.recent[0] = b.largest.Load()
	return r
}

// estimate is the size expected of the next record batch message.
func (r *reservation) estimate() int64 {
	return max(minEstimate, slices.Max(r.recent[:]))
}

// receive reserves room for the next message, calls recv and trues the
// reservation up to the size of what it returned (size: the bytes the
// message holds in memory), which it returns as counted. A nil
// reservation just calls recv. On an error nothing stays counted.
func receive[T any](ctx context.Context, r *reservation, recv func() (T, error), size func(T) int64) (T, int64, error) {
	if r == nil {
		m, err := recv()
		return m, 0, err
	}
	// While a message is received, gRPC holds its frames, and the codec
	// then copies them into the message's one buffer: twice its size, for
	// a moment.
	reserved, err := r.b.acquire(ctx, 2*r.estimate())
	if err != nil {
		var zero T
		return zero, 0, err
	}
	w := r.b.watchIdle(reserved)
	m, err := recv()
	got := w.stop()
	if err != nil {
		r.b.release(got)
		return m, 0, err
	}
	n := size(m)
	if n > got {
		r.b.force(n - got)
		if got == 0 { // given back while idle
			r.b.overIdle.Add(n)
		} else {
			r.b.overEstimate.Add(n - got)
		}
	} else {
		r.b.release(got - n)
	}
	return m, n, nil
}

// idleWatch gives a reservation back once it has waited idle for a
// message while others wait for room (readBudget.watchIdle).
type idleWatch struct {
	b        *readBudget
	reserved int64
	mu       sync.Mutex
	t        *time.Timer
	given    bool // given back
	stopped  bool
}

// watchIdle starts watching a reservation of n bytes.
func (b *readBudget) watchIdle(n int64) *idleWatch {
	w := &idleWatch{b: b, reserved: n}
	if n > 0 {
		w.mu.Lock()
		w.t = time.AfterFunc(b.idle, w.fire)
		w.mu.Unlock()
	}
	return w
}

// fire gives the reservation back if others wait for room; otherwise it
// looks again after another idle period.
func (w *idleWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if w.b.waiting() == 0 {
		w.t = time.AfterFunc(w.b.idle, w.fire)
		return
	}
	w.given = true
	w.b.givenBack.Add(1)
	w.b.release(w.reserved)
}

// stop ends the watch once the message came (or did not) and returns
// what is still reserved.
func (w *idleWatch) stop() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.t != nil {
		w.t.Stop()
	}
	if w.given {
		w.b.givenBack.Add(-1)
		return 0
	}
	return w.reserved
}

// waiting returns how many acquires wait for room.
func (b *readBudget) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiters.Len()
}

// hold keeps n counted bytes of a record batch's message for the next
// take, and makes it one of the sizes the estimates come from.
func (r *reservation) hold(n int64) {
	if r != nil {
		r.pending += n
		r.recent[r.next] = n
		r.next = (r.next + 1) % len(r.recent)
		r.b.seen(n)
	}
}

// boundary says that the message held last ended a microbatch: the next
// one is estimated small.
func (r *reservation) boundary() {
	if r != nil {
		r.recent = [4]int64{}
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
