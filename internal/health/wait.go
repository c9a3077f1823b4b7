package health

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Wait says how Tracker.Wait waits for a service at start.
type Wait struct {
	// Service names the service and its address: "kafka at a:9092".
	Service string
	// Min and Max bound the pause between attempts (doubling, jittered).
	Min, Max time.Duration
	// Timeout ends the wait (0: none); TimeoutKey names its setting.
	Timeout    time.Duration
	TimeoutKey string
	// Permanent, when set, reports the errors waiting cannot fix (a wrong
	// password): Wait returns such an error at once instead of retrying.
	Permanent func(error) bool
}

// Wait calls open until it succeeds, ctx ends or w.Timeout passes, pausing
// with a capped, jittered exponential backoff. Each failed attempt is
// logged with the service's name and makes every stream not ready with it
// as the reason, so /readyz says what the process waits for: a sidecar may
// start before its broker. A timeout is an error naming the service, the
// setting and the last error. An error w.Permanent reports is returned at
// once.
func (t *Tracker) Wait(ctx context.Context, w Wait, open func(context.Context) error) error {
	permanent := func(err error) bool { return w.Permanent != nil && w.Permanent(err) }
	err := open(ctx)
	if err == nil || permanent(err) {
		return err
	}
	if w.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.Timeout)
		defer cancel()
	}
	pause := max(w.Min, time.Millisecond)
	for attempt := 1; ; attempt++ {
		t.log.Warn("waiting for a service at start", "service", w.Service, "attempt", attempt, "retry_in", pause, "err", err)
		t.mu.Lock()
		ids := append([]string(nil), t.order...)
		t.mu.Unlock()
		for _, id := range ids {
			(&Stream{t: t, id: id}).NotReady(fmt.Sprintf("waiting for %s at start (attempt %d): %v", w.Service, attempt, err))
		}
		timer := time.NewTimer(pause + rand.N(pause/5+1))
		select {
		case <-ctx.Done():
			timer.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && w.Timeout > 0 {
				return fmt.Errorf("%s did not answer within %s %s (%d attempts): %w", w.Service, w.TimeoutKey, w.Timeout, attempt, err)
			}
			return ctx.Err()
		case <-timer.C:
		}
		if err = open(ctx); err == nil {
			t.log.Info("service answers", "service", w.Service, "attempts", attempt+1)
			return nil
		} else if permanent(err) {
			return err
		}
		pause = min(2*pause, max(w.Max, w.Min))
	}
}
