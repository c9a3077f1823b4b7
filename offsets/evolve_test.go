package offsets

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReconcileAcceptChange: an evolving stream's changed fingerprint is
// let through and named, in every outcome that would otherwise refuse it;
// without AcceptChange it is refused as before.
func TestReconcileAcceptChange(t *testing.T) {
	now := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	stored := testCheckpoint("s", 5, 3)
	ahead := testCheckpoint("s", 99, 6)
	tests := []struct {
		name   string
		stored *Checkpoint
		kafka  *ControlState
		want   Outcome
	}{
		{name: "in sync", stored: &stored, kafka: stateOf(stored), want: OutcomeInSync},
		{name: "repaired from Kafka", stored: &stored, kafka: stateOf(ahead), want: OutcomeRepaired},
		{name: "rebuilt from Kafka", kafka: stateOf(ahead), want: OutcomeRebuilt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := ReconcileInput{Stream: "s", Fingerprint: "sha256:new", Stored: tt.stored, Kafka: tt.kafka, Now: now}
			_, err := Reconcile(in)
			require.ErrorIs(t, err, ErrFingerprintChanged, "refused without AcceptChange")
			assert.ErrorContains(t, err, "schema_evolution")

			in.AcceptChange = true
			d, err := Reconcile(in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, d.Outcome)
			assert.Equal(t, fp, d.Changed, "the recorded fingerprint is named")
		})
	}
	t.Run("unchanged", func(t *testing.T) {
		d, err := Reconcile(ReconcileInput{Stream: "s", Fingerprint: fp, Stored: &stored, Kafka: stateOf(stored), Now: now, AcceptChange: true})
		require.NoError(t, err)
		assert.Empty(t, d.Changed)
	})
	t.Run("other refusals stay", func(t *testing.T) {
		_, err := Reconcile(ReconcileInput{Stream: "s", Fingerprint: "sha256:new", Stored: &ahead, Kafka: stateOf(stored), Now: now, AcceptChange: true})
		require.ErrorIs(t, err, ErrStoreAhead)
	})
}
