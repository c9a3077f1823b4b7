package offsets

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

const fp = "sha256:sql=1f2e;schema=9a8b" // the fingerprint testCheckpoint uses

// stateOf is the control state Kafka holds for checkpoint cp.
func stateOf(cp Checkpoint) *ControlState {
	return &ControlState{Offset: cp.ControlOffset, Fingerprint: cp.Fingerprint, Snapshot: cp.Snapshot, Batches: cp.Batches}
}

func ptr[T any](v T) *T { return &v }

func TestReconcile(t *testing.T) {
	now := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	stored := testCheckpoint("s", 5, 3) // control offset 102, next 6
	ahead := testCheckpoint("s", 99, 6) // control offset 105, next 12
	ahead.Snapshot.Incomplete = true    // carried over when rebuilt or repaired
	tests := []struct {
		name        string
		fingerprint string
		stored      *Checkpoint
		kafka       *ControlState
		want        Outcome
		commit      bool
		wantCP      *Checkpoint // expected Decision.Checkpoint (CommittedAt = now when rebuilt)
		is          error
		errContains []string
	}{
		{name: "fresh: nothing anywhere", stored: nil, kafka: nil, want: OutcomeFresh,
			wantCP: &Checkpoint{Stream: "s", Fingerprint: fp, ControlOffset: NoOffset,
				Snapshot: reorg.Snapshot{Watermarks: []reorg.Watermark{}}, Batches: []Batch{}}},
		{name: "rebuilt: store empty, Kafka has state", stored: nil, kafka: stateOf(ahead), want: OutcomeRebuilt, commit: true,
			wantCP: ptr(func() Checkpoint { c := ahead; c.Version = 1; c.CommittedAt = now; return c }())},
		{name: "in sync", stored: &stored, kafka: stateOf(stored), want: OutcomeInSync, wantCP: &stored},
		{name: "in sync: nothing ever published", stored: ptr(func() Checkpoint {
			c := testCheckpoint("s", 1, 0)
			return c
		}()), kafka: nil, want: OutcomeInSync, wantCP: ptr(testCheckpoint("s", 1, 0))},
		{name: "repaired: Kafka ahead of store", stored: &stored, kafka: stateOf(ahead), want: OutcomeRepaired, commit: true,
			wantCP: ptr(func() Checkpoint { c := ahead; c.Version = 6; c.CommittedAt = now; return c }())},
		{name: "store ahead: control topic empty", stored: &stored, kafka: nil, want: OutcomeRefusedStoreAhead, is: ErrStoreAhead,
			errContains: []string{"records its last control event at offset 102", "no committed event of the stream at or after that offset",
				"deleted, truncated or recreated", "last committed block 1005", "new stream id"}},
		{name: "store ahead: Kafka older", stored: &ahead, kafka: stateOf(stored), want: OutcomeRefusedStoreAhead, is: ErrStoreAhead,
			errContains: []string{"is at control offset 105, next sequence 12", "is older (offset 102, next sequence 6", "truncated or recreated"}},
		{name: "diverged: same offset, other state", stored: &stored, kafka: func() *ControlState {
			k := stateOf(stored)
			k.Snapshot.Next++
			return k
		}(), want: OutcomeRefusedDiverged, is: ErrDiverged, errContains: []string{"disagree, and neither is a later state of the other"}},
		{name: "diverged: same offset and next, other cursor", stored: &stored, kafka: func() *ControlState {
			k := stateOf(stored)
			k.Snapshot.Watermarks = append([]reorg.Watermark(nil), k.Snapshot.Watermarks...)
			k.Snapshot.Watermarks[2].Ranges = []reorg.BlockRange{rng("mainnet", 1004, 1006)}
			return k
		}(), want: OutcomeRefusedDiverged, is: ErrDiverged, errContains: []string{"cursor mainnet@1006"}},
		{name: "in sync: older batch log not reproduced", stored: &stored, kafka: func() *ControlState {
			k := stateOf(stored)
			k.Batches = k.Batches[1:]
			return k
		}(), want: OutcomeInSync, wantCP: &stored},
		{name: "diverged: later offset, lower sequence", stored: &ahead, kafka: func() *ControlState {
			k := stateOf(stored)
			k.Offset = 500
			return k
		}(), want: OutcomeRefusedDiverged, is: ErrDiverged, errContains: []string{"offset 500, next sequence 6"}},
		{name: "diverged: Kafka state inconsistent", stored: &stored, kafka: func() *ControlState {
			k := stateOf(ahead)
			k.Batches = append([]Batch(nil), k.Batches...)
			k.Batches[0].ID = "0000000000000000"
			return k
		}(), want: OutcomeRefusedDiverged, is: ErrDiverged, errContains: []string{"control event of stream \"s\" at offset 105 cannot be turned into a checkpoint", "does not match its ranges"}},
		{name: "diverged: store returned another stream", stored: ptr(testCheckpoint("t", 1, 1)), kafka: nil,
			want: OutcomeRefusedDiverged, is: ErrDiverged, errContains: []string{`checkpoint of stream "t" when asked for stream "s"`}},
		{name: "fingerprint changed: store", fingerprint: "sha256:new", stored: &stored, kafka: stateOf(stored), want: OutcomeRefusedFingerprint,
			is: ErrFingerprintChanged, errContains: []string{`fingerprint "` + fp + `" (recorded in the checkpoint store) but is now configured with "sha256:new"`,
				"give the changed query a new stream id", "new stream id"}},
		{name: "fingerprint changed: Kafka only", fingerprint: "sha256:new", stored: nil, kafka: stateOf(ahead), want: OutcomeRefusedFingerprint,
			is: ErrFingerprintChanged, errContains: []string{"(recorded in the control topic)"}},
		{name: "fingerprint changed: Kafka differs from store", stored: &stored, kafka: func() *ControlState {
			k := stateOf(ahead)
			k.Fingerprint = "sha256:other"
			return k
		}(), want: OutcomeRefusedFingerprint, is: ErrFingerprintChanged, errContains: []string{`"sha256:other" (recorded in the control topic)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.fingerprint
			if f == "" {
				f = fp
			}
			d, err := Reconcile(ReconcileInput{Stream: "s", Fingerprint: f, Stored: tt.stored, Kafka: tt.kafka, Now: now})
			assert.Equal(t, tt.want, d.Outcome, "outcome %s", d.Outcome)
			if tt.is != nil {
				t.Log(err) // the message a user reads
				require.ErrorIs(t, err, tt.is)
				for _, s := range tt.errContains {
					assert.ErrorContains(t, err, s)
				}
				assert.False(t, d.Commit)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.commit, d.Commit)
			require.NotNil(t, tt.wantCP)
			assert.Equal(t, *tt.wantCP, d.Checkpoint)
			if d.Commit {
				require.NoError(t, d.Checkpoint.Validate(), "a checkpoint to commit is valid")
			}
		})
	}
}

func TestOutcomeLabels(t *testing.T) {
	want := []string{"fresh", "in_sync", "repaired", "rebuilt", "refused_store_ahead", "refused_diverged", "refused_fingerprint"}
	var got []string
	for _, o := range Outcomes() {
		got = append(got, o.String())
	}
	assert.Equal(t, want, got)
	assert.Equal(t, "outcome(0)", Outcome(0).String())
}

// fakeReader is a ControlReader over a fixed state.
type fakeReader struct {
	state *ControlState
	err   error
	from  []int64
}

func (f *fakeReader) NewestState(_ context.Context, stream string, from int64) (*ControlState, error) {
	f.from = append(f.from, from)
	if f.state == nil || f.state.Offset < from {
		return nil, f.err
	}
	return f.state, f.err
}

func TestIntegrationRecover(t *testing.T) {
	now := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	for _, ns := range allStores(t) {
		t.Run(ns.name, func(t *testing.T) {
			ctx, s := t.Context(), ns.store

			// Fresh: nothing committed, the reader is asked from the start.
			r := &fakeReader{}
			d, err := Recover(ctx, s, r, "rec", fp, now)
			require.NoError(t, err)
			assert.Equal(t, OutcomeFresh, d.Outcome)
			assert.Equal(t, []int64{NoOffset}, r.from)
			_, err = s.Load(ctx, "rec")
			require.ErrorIs(t, err, ErrNotFound, "a fresh start commits nothing")

			// Store at version 2 (offset 102); Kafka committed more: repaired to version 3.
			require.NoError(t, s.Commit(ctx, testCheckpoint("rec", 1, 2)))
			require.NoError(t, s.Commit(ctx, testCheckpoint("rec", 2, 3)))
			r = &fakeReader{state: stateOf(testCheckpoint("rec", 0, 5))}
			d, err = Recover(ctx, s, r, "rec", fp, now)
			require.NoError(t, err)
			assert.Equal(t, OutcomeRepaired, d.Outcome)
			assert.Equal(t, []int64{102}, r.from, "the control topic is read from the recorded offset")
			got, err := s.Load(ctx, "rec")
			require.NoError(t, err)
			assert.Equal(t, uint64(3), got.Version)
			assert.Equal(t, int64(104), got.ControlOffset)
			assert.Equal(t, d.Checkpoint, got)

			// Now in sync.
			d, err = Recover(ctx, s, r, "rec", fp, now)
			require.NoError(t, err)
			assert.Equal(t, OutcomeInSync, d.Outcome)

			// The topic lost everything: refused, the store is untouched.
			d, err = Recover(ctx, s, &fakeReader{}, "rec", fp, now)
			require.ErrorIs(t, err, ErrStoreAhead)
			assert.Equal(t, OutcomeRefusedStoreAhead, d.Outcome)
			again, lerr := s.Load(ctx, "rec")
			require.NoError(t, lerr)
			assert.Equal(t, got, again)

			// A reader error is returned with context.
			_, err = Recover(ctx, s, &fakeReader{err: errors.New("broker down")}, "rec", fp, now)
			assert.ErrorContains(t, err, "reading the control topic from offset 104: broker down")

			// Store empty, Kafka has state: rebuilt at version 1.
			d, err = Recover(ctx, s, &fakeReader{state: stateOf(testCheckpoint("reb", 0, 2))}, "reb", fp, now)
			require.NoError(t, err)
			assert.Equal(t, OutcomeRebuilt, d.Outcome)
			got, err = s.Load(ctx, "reb")
			require.NoError(t, err)
			assert.Equal(t, uint64(1), got.Version)
		})
	}
}
