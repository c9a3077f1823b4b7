package reorg

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func requireValidation(t *testing.T, err error, kind ValidationKind, contains ...string) {
	t.Helper()
	require.ErrorIs(t, err, ErrInvalidRanges)
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, kind, ve.Kind, "error: %v", err)
	for _, c := range contains {
		assert.Contains(t, err.Error(), c)
	}
}

func TestB1_ConsecutiveRanges(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, D(R(0, 10, 0)), D(R(11, 20, 0)))
	assert.Equal(t, "D#0 D#1", brief(evs))
}

func TestB2_Gap(t *testing.T) {
	err := Validate([]BlockRange{R(0, 10, 0)}, []BlockRange{R(12, 20, 0)})
	requireValidation(t, err, Gap, "gap on network eth", "0..=10", "12..=20", "blocks 11..=11 are missing")
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, R(0, 10, 0), ve.Previous)
	assert.Equal(t, R(12, 20, 0), ve.Incoming)

	m := newMachine(t, DefaultRetention, Snapshot{})
	feed(t, m, D(R(0, 10, 0)))
	_, err = m.Apply([]BlockRange{R(12, 20, 0)}, false, 1)
	requireValidation(t, err, Gap)
	assert.Equal(t, []BlockRange{R(0, 10, 0)}, m.Previous(), "state unchanged after a validation error")
}

func TestB3_HashMismatchOnConsecutiveBlocks(t *testing.T) {
	bad := withPrev(R(11, 20, 0), H("eth", 7, 10))
	err := Validate([]BlockRange{R(0, 10, 0)}, []BlockRange{bad})
	requireValidation(t, err, HashMismatch, "hash mismatch on network eth", H("eth", 0, 10).String(), H("eth", 7, 10).String())
}

func TestB4_InvalidReorg(t *testing.T) {
	in := withPrev(R(10, 20, 1), H("eth", 0, 10))
	err := Validate([]BlockRange{R(0, 10, 0)}, []BlockRange{in})
	requireValidation(t, err, InvalidReorg, "invalid reorg on network eth", "10..=20", H("eth", 0, 10).String())
}

func TestB5_ReorgBeforeBatchEvent(t *testing.T) {
	prev, in := []BlockRange{R(11, 15, 0)}, []BlockRange{R(11, 12, 1)}
	require.NoError(t, Validate(prev, in))
	assert.Equal(t, []Invalidation{{Network: "eth", Start: 11, End: 15}}, Detect(prev, in))

	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)), D(R(11, 15, 0)), D(R(11, 12, 1)))
	require.Equal(t, "D#0 W#1 D#2 U#3:reorg:2..=2 D#4", brief(evs))
	assert.Equal(t, []Invalidation{{Network: "eth", Start: 11, End: 15}}, evs[3].Invalidations)
}

func TestB6_ReorgBeyondPreviousEnd(t *testing.T) {
	prev, in := []BlockRange{R(11, 20, 0)}, []BlockRange{R(15, 25, 1)}
	require.NoError(t, Validate(prev, in))
	assert.Equal(t, []Invalidation{{Network: "eth", Start: 15, End: 25}}, Detect(prev, in))
}

func TestB7_RepeatedRangeIsNoReorg(t *testing.T) {
	r := []BlockRange{R(0, 10, 0)}
	require.NoError(t, Validate(r, r))
	assert.Empty(t, Detect(r, r))

	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, D(r...), D(r...), K(r...), W(r...))
	assert.Equal(t, "D#0 D#1 W#2", brief(evs), "a keep-alive emits no event (Go: it has no rows to write)")
}

func TestB8_DuplicateNetwork(t *testing.T) {
	err := Validate(nil, []BlockRange{R(0, 10, 0), R(0, 10, 0)})
	requireValidation(t, err, DuplicateNetwork, `network "eth" appears twice`)
}

func TestB9_NetworkSetChanges(t *testing.T) {
	prev := []BlockRange{R(0, 10, 0)}
	err := Validate(prev, []BlockRange{R(11, 20, 0), Rn("polygon", 11, 20, 0)})
	requireValidation(t, err, NetworkCountChanged, "2 networks [eth polygon]", "previous batch had 1 [eth]")
	err = Validate(prev, []BlockRange{Rn("polygon", 11, 20, 0)})
	requireValidation(t, err, UnexpectedNetwork, `network "polygon"`)
}

func TestB10_Genesis(t *testing.T) {
	tests := []struct {
		name string
		r    BlockRange
		kind ValidationKind // 0: valid
	}{
		{"genesis null prev", R(0, 10, 0), 0},
		{"genesis zero prev", withPrev(R(0, 10, 0), Hash{}), 0},
		{"genesis non-zero prev", withPrev(R(0, 10, 0), H("eth", 0, 1)), InvalidPrevHash},
		{"after genesis null prev", BlockRange{Network: "eth", Start: 5, End: 10, Hash: H("eth", 0, 10)}, MissingPrevHash},
		{"after genesis zero prev", withPrev(R(5, 10, 0), Hash{}), MissingPrevHash},
		{"start after end", BlockRange{Network: "eth", Start: 11, End: 10}, InvalidRange},
		{"empty network", BlockRange{Start: 0, End: 10}, InvalidRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(nil, []BlockRange{tt.r})
			if tt.kind == 0 {
				require.NoError(t, err)
				return
			}
			requireValidation(t, err, tt.kind)
		})
	}
}

func TestB11_NoReorgOnRepeatedRange(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, D(R(100, 110, 0)), D(R(100, 110, 0)), W(R(100, 110, 0)), D(R(111, 120, 0)))
	assert.Equal(t, "D#0 D#1 W#2 D#3", brief(evs))
}

func TestValidationErrorMessages(t *testing.T) {
	kinds := []ValidationKind{InvalidRange, InvalidPrevHash, MissingPrevHash, DuplicateNetwork,
		NetworkCountChanged, UnexpectedNetwork, Gap, HashMismatch, InvalidReorg}
	for _, k := range kinds {
		e := &ValidationError{Kind: k, Network: "eth", Previous: R(0, 10, 0), Incoming: R(11, 20, 0),
			PreviousNetworks: []string{"eth"}, IncomingNetworks: []string{"eth", "polygon"}}
		assert.Contains(t, e.Error(), "resume from the last committed checkpoint", k.String())
		require.ErrorIs(t, e, ErrInvalidRanges)
		assert.NotContains(t, k.String(), "ValidationKind(")
	}
}
