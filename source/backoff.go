package source

import (
	"math"
	"time"
)

// Clock is the time source of the reconnect backoff; tests inject one that
// fires at once and records the requested delays.
type Clock interface {
	// After returns a channel that receives after d.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

var _ Clock = realClock{}

func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// delay returns the wait before the n-th consecutive retry (n >= 1):
// min(Max, Initial·Multiplier^(n-1)), then reduced by up to Jitter of itself
// using r, a random number in [0,1).
func (b BackoffConfig) delay(n int, r float64) time.Duration {
	if n < 1 {
		n = 1
	}
	d := float64(b.Initial) * math.Pow(b.Multiplier, float64(n-1))
	if d > float64(b.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		d = float64(b.Max)
	}
	d -= d * b.Jitter * r
	return time.Duration(d)
}
