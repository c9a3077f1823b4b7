package pipeline

import (
	"context"
	"errors"
	"time"
)

// supervisor runs a stream's run loop again after every error that is not
// permanent (Permanent), pausing between runs: the pause starts at min,
// doubles after each restart up to max, and starts over at min after a run
// that lasted longer than 10×max (it ran well for a while).
type supervisor struct {
	min, max time.Duration
	// now is the clock that measures a run's length.
	now func() time.Time
	// restarted is told of each restart, before its pause; nil: nothing.
	restarted func(err error, pause time.Duration)
}

// run calls once until ctx ends (then it returns nil, unless once failed
// permanently), once returns nil, or once returns a permanent error, which
// run returns.
func (s supervisor) run(ctx context.Context, once func(context.Context) error) error {
	pause := s.min
	for {
		began := s.now()
		err := once(ctx)
		if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || !Permanent(err)) {
			return nil
		}
		if err == nil || Permanent(err) {
			return err
		}
		if s.now().Sub(began) > 10*s.max {
			pause = s.min
		}
		if s.restarted != nil {
			s.restarted(err, pause)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		pause = min(2*pause, s.max)
	}
}
