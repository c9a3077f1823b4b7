package sink

import (
	"errors"
	"fmt"
	"time"
)

// Budget sizes a transaction. The run loop closes a transaction only at a
// complete watermark (ranges_complete), and only once the budget is used up,
// so a chain with 200 ms blocks is not one transaction per block, and a
// transaction never ends inside a microbatch.
type Budget struct {
	// MaxRows closes the transaction once it holds this many rows
	// (default 50,000).
	MaxRows int
	// MaxAge closes the transaction once it has been open this long
	// (default 100 ms).
	MaxAge time.Duration
}

// DefaultBudget returns 50,000 rows / 100 ms.
func DefaultBudget() Budget {
	return Budget{MaxRows: 50_000, MaxAge: 100 * time.Millisecond}
}

// Validate checks both limits.
func (b Budget) Validate() error {
	var errs []error
	if b.MaxRows <= 0 {
		errs = append(errs, fmt.Errorf("transaction.max_rows: %d must be > 0 (default 50000)", b.MaxRows))
	}
	if b.MaxAge <= 0 {
		errs = append(errs, fmt.Errorf("transaction.max_age: %s must be > 0 (default 100ms)", b.MaxAge))
	}
	return errors.Join(errs...)
}

// Due reports whether an open transaction that has rows rows and was begun
// at began should be committed at a complete watermark observed at now.
func (b Budget) Due(rows int, began, now time.Time) bool {
	return rows >= b.MaxRows || now.Sub(began) >= b.MaxAge
}

// Remaining returns how long until the age limit of a transaction begun at
// began is reached (0 if it is), so the run loop can set a timer.
func (b Budget) Remaining(began, now time.Time) time.Duration {
	return max(0, b.MaxAge-now.Sub(began))
}
