package source

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
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
// random sizes, some larger than their estimates, some after an idle wait,
// through a small budget, and consumers that hold each envelope a while:
// every message must get through (no waiter is left without room), and
// nothing stays counted at the end.
func TestReadBudgetStress(t *testing.T) {
	const streams, msgs, total = 8, 200, 64 << 10
	b := newReadBudget(total)
	b.idle = 2 * time.Millisecond
	b.largest.Store(16 << 10)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
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
				_, n, err := receive(ctx, r, func() (int64, error) {
					time.Sleep(delay)
					return size, nil
				}, func(v int64) int64 { return v })
				if err != nil {
					errs <- err
					return
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
	assert.Equal(t, int64(0), b.Held(), "counted bytes left over")
}

func TestChargeReleaseOnce(t *testing.T) {
	b := newReadBudget(100)
	r := newReservation(b)
	_, n, err := receive(t.Context(), r, func() (int64, error) { return 30, nil }, func(v int64) int64 { return v })
	require.NoError(t, err)
	r.hold(n)
	c := r.take()
	require.NotNil(t, c)
	assert.Equal(t, int64(30), b.Held())
	c.release()
	c.release()
	assert.Equal(t, int64(0), b.Held())

	// Close gives back what the consumer kept, once.
	_, n, err = receive(t.Context(), r, func() (int64, error) { return 20, nil }, func(v int64) int64 { return v })
	require.NoError(t, err)
	r.hold(n)
	kept := r.take()
	r.close()
	assert.Equal(t, int64(0), b.Held())
	kept.release()
	assert.Equal(t, int64(0), b.Held())

	// An error of recv leaves nothing counted.
	_, _, err = receive(t.Context(), newReservation(b), func() (int64, error) { return 0, errors.New("reset") }, func(v int64) int64 { return v })
	require.Error(t, err)
	assert.Equal(t, int64(0), b.Held())
}

// TestReservationEstimate: a stream reserves for the largest of its last
// messages, and after a microbatch's last message next to nothing (it may
// wait there for a block at the head of its chain).
func TestReservationEstimate(t *testing.T) {
	b := newReadBudget(64 << 20)
	r := newReservation(b)
	assert.Equal(t, int64(ampMessageBytes), r.estimate(), "a new stream: Amp's message size")
	for _, n := range []int64{1 << 20, 300 << 10, 2 << 20, 100 << 10, 50 << 10} {
		r.hold(n)
	}
	assert.Equal(t, int64(2<<20), r.estimate(), "the largest of the last four")
	r.hold(60 << 10)
	r.hold(70 << 10)
	r.hold(80 << 10)
	assert.Equal(t, int64(80<<10), r.estimate(), "the 2 MiB message is no longer among the last four")
	r.boundary()
	assert.Equal(t, int64(minEstimate), r.estimate(), "after a microbatch's last message")
	r.drop()
}

// TestReadBudgetOverCounts: what is counted only once it is in, beyond a
// stream's reservation, is counted by cause, and a stream that gave its
// reservation back counts as such until its message comes.
func TestReadBudgetOverCounts(t *testing.T) {
	const kib = 1 << 10
	b := newReadBudget(1024 * kib)
	b.idle = time.Millisecond
	r := newReservation(b)
	r.recent[0] = 8 * kib // reserves 16 KiB
	_, n, err := receive(t.Context(), r, func() (int64, error) { return 50 * kib, nil }, func(v int64) int64 { return v })
	require.NoError(t, err)
	assert.Equal(t, int64(34*kib), b.overEstimate.Load(), "50 KiB received on a reservation of 16")
	assert.Zero(t, b.overIdle.Load())
	r.hold(n)
	r.take().release()

	// A reservation of the whole budget is given back while another
	// waits, and the message comes after.
	r.recent = [4]int64{512 * kib}
	msg := make(chan int64)
	done := make(chan error, 1)
	go func() {
		_, _, err := receive(t.Context(), r, func() (int64, error) { return <-msg, nil }, func(v int64) int64 { return v })
		done <- err
	}()
	waitFor(t, func() bool { return b.Held() == 1024*kib })
	other := acquireAsync(t.Context(), b, 10*kib)
	require.NoError(t, within(t, other, "the acquire after the idle stream gave its reservation back"))
	waitFor(t, func() bool { return b.givenBack.Load() == 1 })
	msg <- 40 * kib
	require.NoError(t, within(t, done, "the idle stream's receive"))
	assert.Equal(t, int64(40*kib), b.overIdle.Load(), "the message of a stream that gave its reservation back")
	assert.Zero(t, b.givenBack.Load())
	assert.Equal(t, int64(34*kib), b.overEstimate.Load())
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
