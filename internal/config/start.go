package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// Start positions and one-shot loads (issue #16 items 2 and 3): the keys
// streams[].start and streams[].mode, their defaults and their checks, kept
// apart from the other stream keys.

// StartPosition is where a new stream's live part begins: earliest (the
// first block Amp has synced, the default), latest (the first block after
// Amp's synced head when the stream first starts) or a block number.
type StartPosition string

// Start positions; a block number is written as its decimal digits.
const (
	StartEarliest StartPosition = "earliest"
	StartLatest   StartPosition = "latest"
)

// Block returns the start block of a numeric position (ok true), or ok
// false for earliest and latest; err says what is wrong with any other
// value.
func (p StartPosition) Block() (n uint64, ok bool, err error) {
	switch p {
	case StartEarliest, StartLatest, "":
		return 0, false, nil
	}
	n, err = strconv.ParseUint(strings.TrimSpace(string(p)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%q: want earliest, latest or a block number (e.g. 24000000)", string(p))
	}
	return n, true, nil
}

// StreamMode is how a stream runs: live (default: for ever, following the
// chain) or once (publish backfill.from to backfill.to, then stop).
type StreamMode string

// Stream modes.
const (
	ModeLive StreamMode = "live"
	ModeOnce StreamMode = "once"
)

// defaultsStart sets the defaults of the start and mode keys. A one-shot
// load runs on the backfill's machinery, so mode once turns it on.
func defaultsStart(s *StreamConfig) {
	setDefault(&s.Start, StartEarliest)
	setDefault(&s.Mode, ModeLive)
	if s.Mode == ModeOnce {
		s.Backfill.Enabled = true
	}
}

// validateStart checks the start and mode keys of stream s (key names it
// in messages), and refuses the combinations with the backfill that
// contradict each other.
func validateStart(key string, s StreamConfig, bad func(key, format string, args ...any)) {
	if s.Mode != ModeLive && s.Mode != ModeOnce {
		bad(key+".mode", "%q: want live or once", s.Mode)
	}
	_, numeric, err := s.Start.Block()
	if err != nil {
		bad(key+".start", "%v", err)
		return
	}
	notEarliest := numeric || s.Start == StartLatest
	switch {
	case s.Mode == ModeOnce && notEarliest:
		bad(key+".start", "%s does not apply to mode once: a one-shot load publishes [backfill.from, backfill.to); "+
			"set backfill.from to the first block instead", s.Start)
	case notEarliest && s.Backfill.Enabled:
		bad(key+".start", "%s contradicts backfill.enabled: a backfill publishes the history from backfill.from and goes "+
			"live where it ends; choose the first block with backfill.from, or drop the backfill to start live at a block", s.Start)
	}
	if s.Backfill.Enabled && s.Mode != ModeOnce && strings.TrimSpace(s.SQL) != "" {
		if hz, err := source.SplitHazards(s.SQL, s.Backfill.Column); err == nil && len(hz) > 0 {
			bad(key+".sql", "has %s, which computes over the rows of many blocks: the backfill's partitions would each compute it "+
				"again, over whatever Amp has synced when each runs, and Amp streams only queries it can compute block by block, so "+
				"the live stream would be refused too. Publish it with mode: once (one batch query over [backfill.from, backfill.to)), "+
				"or make each row one block's (GROUP BY %s, …)", strings.Join(hz, ", "), s.Backfill.Column)
		}
	}
	if s.Mode == ModeOnce && s.Backfill.To == 0 {
		bad(key+".backfill.to", "is 0, but mode once publishes [backfill.from, backfill.to) and then stops: set backfill.to "+
			"to the first block not to publish (it must be backfill.handover_margin blocks below Amp's synced head)")
	}
}
