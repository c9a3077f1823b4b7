package source

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// acquireAsync starts acquire(n) and returns a channel that receives its
// error once it returns.
func acquireAsync(ctx context.Context, b *readBudget, n int64) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := b.acquire(ctx, n)
		done <- err
	}()
	return done
}

// waiting returns how many acquires of b wait for room.
func (b *readBudget) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiters.Len()
}

// knownSizes returns a call whose next messages are known to be ns long.
func knownSizes(ns ...int64) *callSizes {
	c := newSizeWatch().track()
	gen := c.bind()
	for _, n := range ns {
		c.push(gen, n)
	}
	return c
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, time.Millisecond)
}

func TestReadBudgetOrder(t *testing.T) {
	b := newReadBudget(10)
	n, err := b.acquire(t.Context(), 5)
	require.NoError(t, err)
	assert.Equal(t, int64(5), n)

	big := acquireAsync(t.Context(), b, 8)
	waitFor(t, func() bool { return b.waiting() == 1 })
	small := acquireAsync(t.Context(), b, 1) // fits, but comes after big
	waitFor(t, func() bool { return b.waiting() == 2 })
	select {
	case err := <-small:
		t.Fatalf("a later, smaller acquire overtook a waiting one (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}

	b.release(5)
	require.NoError(t, <-big)
	require.NoError(t, <-small)
	assert.Equal(t, int64(9), b.Held())
}

func TestReadBudgetForceAndCancel(t *testing.T) {
	b := newReadBudget(10)
	b.force(15) // a message in hand larger than the budget
	assert.Equal(t, int64(15), b.Held())

	ctx, cancel := context.WithCancel(t.Context())
	first := acquireAsync(ctx, b, 4)
	waitFor(t, func() bool { return b.waiting() == 1 })
	second := acquireAsync(t.Context(), b, 4)
	waitFor(t, func() bool { return b.waiting() == 2 })
	cancel()
	require.ErrorIs(t, <-first, context.Canceled)
	assert.Equal(t, 1, b.waiting(), "a cancelled waiter stays in line")

	b.release(10) // 5 held: the second fits
	require.NoError(t, <-second)
	assert.Equal(t, int64(9), b.Held())
	b.release(9)
	assert.Equal(t, int64(0), b.Held())

	// An acquire of more than the whole budget reserves the whole budget.
	n, err := b.acquire(t.Context(), 25)
	require.NoError(t, err)
	assert.Equal(t, int64(10), n)
}

// TestReadBudgetStress runs streams whose readers receive messages of
// random sizes through a small budget, most known before they are
// received, some not, and consumers that hold each envelope a while: every
// message must get through (no waiter is left without room), what is held
// never exceeds the budget by more than the unsized messages, and nothing
// stays counted at the end.
func TestReadBudgetStress(t *testing.T) {
	const streams, msgs, total = 8, 200, 64 << 10
	b := newReadBudget(total)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var over atomic.Int64 // the most held beyond total and the unsized bytes
	errs := make(chan error, streams)
	for s := range streams {
		r := newReservation(b)
		queue := make(chan *charge, 4)
		wg.Go(func() { // the reader
			defer close(queue)
			rng := rand.New(rand.NewPCG(uint64(s), 1))
			for range msgs {
				size := int64(rng.IntN(24<<10) + 1)
				delay := time.Duration(rng.IntN(4)) * time.Millisecond
				var sizes *callSizes // unknown
				if rng.IntN(10) > 0 {
					sizes = knownSizes(size)
				}
				_, n, err := receive(ctx, r, sizes, func() (int64, error) {
					time.Sleep(delay)
					return size, nil
				}, func(v int64) int64 { return v })
				if err != nil {
					errs <- err
					return
				}
				if d := b.Held() - total - b.unsized.Load(); d > over.Load() {
					over.Store(d)
				}
				r.hold(n)
				select {
				case queue <- r.take():
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
			}
		})
		wg.Go(func() { // the consumer
			rng := rand.New(rand.NewPCG(uint64(s), 2))
			for c := range queue {
				time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				c.release()
			}
			r.close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "a stream did not get its messages through the budget")
	}
	assert.LessOrEqual(t, over.Load(), int64(0), "held beyond the budget and the unsized messages")
	assert.Positive(t, b.unsized.Load(), "no message of unknown length")
	assert.Equal(t, int64(0), b.Held(), "counted bytes left over")
}

func TestChargeReleaseOnce(t *testing.T) {
	b := newReadBudget(100)
	r := newReservation(b)
	_, n, err := receive(t.Context(), r, nil, func() (int64, error) { return 30, nil }, func(v int64) int64 { return v })
	require.NoError(t, err)
	r.hold(n)
	c := r.take()
	require.NotNil(t, c)
	assert.Equal(t, int64(30), b.Held())
	c.release()
	c.release()
	assert.Equal(t, int64(0), b.Held())

	// Close gives back what the consumer kept, once.
	_, n, err = receive(t.Context(), r, nil, func() (int64, error) { return 20, nil }, func(v int64) int64 { return v })
	require.NoError(t, err)
	r.hold(n)
	kept := r.take()
	r.close()
	assert.Equal(t, int64(0), b.Held())
	kept.release()
	assert.Equal(t, int64(0), b.Held())

	// An error of recv leaves nothing counted.
	_, _, err = receive(t.Context(), newReservation(b), nil, func() (int64, error) { return 0, errors.New("reset") }, func(v int64) int64 { return v })
	require.Error(t, err)
	assert.Equal(t, int64(0), b.Held())
}

// TestReceiveReservesTheKnownSize: a message whose length is known is
// reserved twice over before it is received and trued up after; one whose
// length is not known is counted once it is in, as unsized; one larger
// than the budget reserves the whole budget.
func TestReceiveReservesTheKnownSize(t *testing.T) {
	b := newReadBudget(100)
	r := newReservation(b)
	recv := func(n int64, during *int64) func() (int64, error) {
		return func() (int64, error) {
			*during = b.Held()
			return n, nil
		}
	}
	id := func(v int64) int64 { return v }
	var during int64
	_, n, err := receive(t.Context(), r, knownSizes(30), recv(30, &during), id)
	require.NoError(t, err)
	assert.Equal(t, int64(60), during, "reserved while received: frames and buffer")
	assert.Equal(t, int64(30), n)
	assert.Equal(t, int64(30), b.Held(), "trued up")
	r.hold(n)
	r.take().release()

	_, n, err = receive(t.Context(), r, nil, recv(30, &during), id)
	require.NoError(t, err)
	assert.Zero(t, during, "nothing reserved for a length not known")
	assert.Equal(t, int64(30), b.Held())
	assert.Equal(t, int64(30), b.unsized.Load())
	r.hold(n)
	r.take().release()

	_, n, err = receive(t.Context(), r, knownSizes(80), recv(80, &during), id)
	require.NoError(t, err)
	assert.Equal(t, int64(100), during, "a message larger than the budget: all of it")
	assert.Equal(t, int64(80), b.Held())
	assert.Equal(t, int64(30), b.unsized.Load(), "known, so not unsized")
	r.hold(n)
	r.take().release()
	assert.Zero(t, b.Held())

	// A stream waiting for the length of its next message holds nothing
	// and returns when its context ends.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := receive(ctx, r, knownSizes(), recv(1, &during), id)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	assert.Zero(t, b.Held())
	cancel()
	require.ErrorIs(t, within(t, done, "receive after its context ended"), context.Canceled)
}

// within waits at most 5 s for ch's value, so that a test fails instead
// of hanging when it never comes.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing within 5 s", what)
		panic("unreachable")
	}
}
