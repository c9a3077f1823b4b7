package pipeline

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
)

// defaultProgressEvery is how often a running backfill reports its
// progress when Deps.ProgressEvery is 0.
const defaultProgressEvery = 10 * time.Second

// Progress is how far a backfill is: blocks done of the total, and what
// this run of it published, from which its rate and ETA follow.
type Progress struct {
	// BlocksTotal is the blocks of the backfill's span; BlocksDone those
	// published, by this run or earlier ones.
	BlocksTotal, BlocksDone uint64
	// BlocksAtStart were already done when this run started: the rate
	// counts only the blocks done since.
	BlocksAtStart uint64
	// Rows is the rows this run published.
	Rows uint64
	// Elapsed is how long this run has been publishing.
	Elapsed time.Duration
}

// Fraction returns BlocksDone / BlocksTotal in [0, 1] (1 for an empty span).
func (p Progress) Fraction() float64 {
	if p.BlocksTotal == 0 {
		return 1
	}
	return min(1, float64(p.BlocksDone)/float64(p.BlocksTotal))
}

// RowsPerSec returns the rows published per second of this run (ok false
// before any time has passed).
func (p Progress) RowsPerSec() (float64, bool) {
	if p.Elapsed <= 0 {
		return 0, false
	}
	return float64(p.Rows) / p.Elapsed.Seconds(), true
}

// ETA returns the time left at this run's block rate (ok false until this
// run has published a block).
func (p Progress) ETA() (time.Duration, bool) {
	if p.BlocksDone >= p.BlocksTotal {
		return 0, true
	}
	ran := p.BlocksDone - min(p.BlocksDone, p.BlocksAtStart)
	if ran == 0 || p.Elapsed <= 0 {
		return 0, false
	}
	left := p.BlocksTotal - p.BlocksDone
	return time.Duration(float64(p.Elapsed) * float64(left) / float64(ran)), true
}

// String renders the figures for people: "1200/5000 blocks (24.0%), 850
// rows/s, ETA 3m10s".
func (p Progress) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d blocks (%.1f%%)", p.BlocksDone, p.BlocksTotal, 100*p.Fraction())
	if r, ok := p.RowsPerSec(); ok {
		fmt.Fprintf(&b, ", %.0f rows/s", r)
	}
	if p.BlocksDone >= p.BlocksTotal {
		return b.String()
	}
	if eta, ok := p.ETA(); ok {
		fmt.Fprintf(&b, ", ETA %s", eta.Round(time.Second))
	} else {
		b.WriteString(", ETA unknown")
	}
	return b.String()
}

// logAttrs are the figures as log attributes.
func (p Progress) logAttrs() []any {
	attrs := []any{"blocks_done", p.BlocksDone, "blocks_total", p.BlocksTotal,
		"percent", fmt.Sprintf("%.1f", 100*p.Fraction()), "rows", p.Rows, "elapsed", p.Elapsed.Round(time.Second).String()}
	if r, ok := p.RowsPerSec(); ok {
		attrs = append(attrs, "rows_per_s", int64(r))
	}
	if eta, ok := p.ETA(); ok {
		attrs = append(attrs, "eta", eta.Round(time.Second).String())
	}
	return attrs
}

// bar renders a one-line progress bar of width cells, for a terminal.
func (p Progress) bar(stream string, width int) string {
	full := int(p.Fraction() * float64(width))
	return fmt.Sprintf("\rbackfill %s [%s%s] %s\x1b[K", stream, strings.Repeat("=", full), strings.Repeat(" ", width-full), p)
}

// PartitionProgress returns a backfill's progress as its partition
// records say: blocks done of the total always; rows, elapsed time and the
// blocks done at the run's start only when the records carry them
// (RunStartedAt), so that a rate and an ETA follow.
func PartitionProgress(recs []offsets.Partition) Progress {
	var p Progress
	var first, last time.Time
	for _, r := range recs {
		done := uint64(0)
		switch {
		case r.Done:
			done = r.To - r.From
		case r.Last != nil:
			done = r.Last.Number + 1 - r.From
		}
		p.BlocksTotal += r.To - r.From
		p.BlocksDone += done
		if r.RunStartedAt.IsZero() {
			p.BlocksAtStart += done // no rate from this record
			continue
		}
		p.BlocksAtStart += r.RunFrom - r.From
		p.Rows += r.Rows
		if first.IsZero() || r.RunStartedAt.Before(first) {
			first = r.RunStartedAt
		}
		if r.UpdatedAt.After(last) {
			last = r.UpdatedAt
		}
	}
	if !first.IsZero() && last.After(first) {
		p.Elapsed = last.Sub(first)
	}
	return p
}

// reportProgress calls report with snap() every interval until ctx ends.
func reportProgress(ctx context.Context, every time.Duration, snap func() Progress, report func(Progress)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			report(snap())
		}
	}
}

// progressReporter returns how the stream reports backfill progress: a
// bar redrawn on Deps.ProgressBar (a terminal), else an Info line.
func (r *Stream) progressReporter() (report func(Progress), finish func()) {
	if w := r.deps.ProgressBar; w != nil {
		return func(p Progress) { _, _ = io.WriteString(w, p.bar(r.cfg.ID, 30)) },
			func() { _, _ = io.WriteString(w, "\n") }
	}
	return func(p Progress) { r.log.Info("backfill progress", p.logAttrs()...) }, func() {}
}
