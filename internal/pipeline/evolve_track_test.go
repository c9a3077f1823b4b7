package pipeline

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
)

// trackingHealth records the calls tracked as in flight.
type trackingHealth struct {
	noHealth
	mu   sync.Mutex
	open []string
}

func (h *trackingHealth) Track(what string) func() {
	h.mu.Lock()
	h.open = append(h.open, what)
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.open = slices.DeleteFunc(h.open, func(s string) bool { return s == what })
	}
}

func (h *trackingHealth) inFlight() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.open)
}

// seenStore is a store that records what was in flight during its calls.
type seenStore struct {
	h    *trackingHealth
	seen [][]string
}

func (s *seenStore) Load(context.Context, string) (offsets.Checkpoint, error) {
	s.seen = append(s.seen, s.h.inFlight())
	return offsets.Checkpoint{}, offsets.ErrNotFound
}

func (s *seenStore) Commit(context.Context, offsets.Checkpoint) error {
	s.seen = append(s.seen, s.h.inFlight())
	return nil
}

// seenLog is a control log that records what was in flight during its reads.
type seenLog struct {
	h    *trackingHealth
	seen [][]string
}

func (l *seenLog) Bounds(context.Context) (offsets.ControlBounds, error) {
	l.seen = append(l.seen, l.h.inFlight())
	return offsets.ControlBounds{}, nil
}

func (l *seenLog) Scan(context.Context, int64, int64, func([]offsets.ControlRecord) error) error {
	return nil
}

// TestReconcileStepsAreTracked: while the reconciliation waits on the
// checkpoint store or the control topic, the stream's health names that
// step (a member's warning about a stream that does not stop, and /readyz,
// say which service holds it), and nothing stays tracked afterwards.
func TestReconcileStepsAreTracked(t *testing.T) {
	h := &trackingHealth{}
	st, lg := &seenStore{h: h}, &seenLog{h: h}
	codec, err := offsets.NewControlCodec()
	require.NoError(t, err)
	store := trackedStore{Store: st, h: h}
	control := trackedControl{c: offsets.NewControl(lg, codec, "ctl"), h: h}

	_, err = store.Load(t.Context(), "s")
	require.ErrorIs(t, err, offsets.ErrNotFound)
	require.NoError(t, store.Commit(t.Context(), offsets.Checkpoint{}))
	_, err = control.NewestState(t.Context(), "s", offsets.NoOffset)
	require.NoError(t, err)

	assert.Equal(t, [][]string{{"checkpoint store: reading the checkpoint"},
		{"checkpoint store: writing the checkpoint rebuilt from the control topic"}}, st.seen)
	assert.Equal(t, [][]string{{"kafka: reading the control topic (after every transaction open on it ends)"}}, lg.seen)
	assert.Empty(t, h.inFlight())
}
