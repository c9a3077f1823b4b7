package offsets

import (
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// hashOf returns a deterministic block hash for a network and block number.
func hashOf(network string, n uint64) reorg.Hash {
	return reorg.Hash(sha256.Sum256(fmt.Appendf(nil, "%s/%d", network, n)))
}

// rng builds the range start..=end of network with chained hashes.
func rng(network string, start, end uint64) reorg.BlockRange {
	return reorg.BlockRange{Network: network, Start: start, End: end, Hash: hashOf(network, end),
		PrevHash: hashOf(network, start-1), HasPrevHash: true}
}

// testCheckpoint builds a consistent checkpoint with n retained microbatches
// of 2 blocks each on "mainnet": batch i has Data sequence 2i and watermark
// sequence 2i+1, which keys its batch log entry.
func testCheckpoint(stream string, version uint64, n int) Checkpoint {
	cp := Checkpoint{
		Stream: stream, Version: version, Fingerprint: "sha256:sql=1f2e;schema=9a8b",
		CommittedAt:   time.Date(2026, 11, 30, 2, 30, 0, 123456789, time.UTC),
		ControlOffset: NoOffset,
		Snapshot:      reorg.Snapshot{Watermarks: []reorg.Watermark{}},
		Batches:       []Batch{},
	}
	for i := range n {
		r := rng("mainnet", 1000+uint64(2*i), 1001+uint64(2*i))
		rs := []reorg.BlockRange{r}
		cp.Batches = append(cp.Batches, Batch{Seq: uint64(2*i + 1), ID: reorg.BatchID(rs), Ranges: rs,
			Spans: []Span{{Topic: "amp." + stream, Partition: int32(i % 3), First: int64(10 * i), Last: int64(10*i + 9)}}})
		cp.Snapshot.Watermarks = append(cp.Snapshot.Watermarks, reorg.Watermark{Seq: uint64(2*i + 1), Ranges: rs})
		cp.Snapshot.Next = uint64(2*i + 2)
		cp.ControlOffset = int64(100 + i)
	}
	return cp
}

// goldenCheckpoint exercises every field: two networks, a genesis range
// without prev_hash, a timestamp, a batch spanning two partitions and an
// empty batch (a microbatch without rows).
func goldenCheckpoint() Checkpoint {
	a := rng("mainnet", 100, 102)
	a.Timestamp = 1764469800
	b := reorg.BlockRange{Network: "base", Start: 0, End: 4, Hash: hashOf("base", 4)}
	both := []reorg.BlockRange{a, b}
	c := []reorg.BlockRange{rng("mainnet", 103, 103), rng("base", 5, 6)}
	return Checkpoint{
		Stream: "transfers.v1", Version: 7, Fingerprint: "sha256:3f1c0a",
		CommittedAt:   time.Date(2026, 11, 30, 2, 30, 0, 5, time.FixedZone("CET", 3600)),
		ControlOffset: 4242,
		Snapshot: reorg.Snapshot{Next: 12, Watermarks: []reorg.Watermark{
			{Seq: 8, Ranges: both}, {Seq: 11, Ranges: c},
		}, Incomplete: true},
		Batches: []Batch{
			{Seq: 8, ID: reorg.BatchID(both), Ranges: both, Spans: []Span{
				{Topic: "amp.transfers", Partition: 0, First: 10, Last: 19},
				{Topic: "amp.transfers", Partition: 2, First: 0, Last: 3},
			}},
			{Seq: 11, ID: reorg.BatchID(c), Ranges: c, Spans: []Span{}},
		},
	}
}

func TestMarshalGolden(t *testing.T) {
	path := filepath.Join("testdata", "checkpoint_v1.golden.json")
	got, err := Marshal(goldenCheckpoint())
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./offsets -run TestMarshalGolden -update to create it")
	assert.Equal(t, string(want), string(got), "the encoding changed: bump FormatVersion and keep reading format 1")

	cp, err := Unmarshal(want)
	require.NoError(t, err)
	exp := goldenCheckpoint()
	exp.CommittedAt = exp.CommittedAt.UTC()
	assert.Equal(t, exp, cp)
	again, err := Marshal(cp)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(again))
}

func TestUnmarshalErrors(t *testing.T) {
	good, err := Marshal(goldenCheckpoint())
	require.NoError(t, err)
	tests := []struct {
		name        string
		in          string
		is          error
		errContains string
	}{
		{name: "not json", in: "{", errContains: "decoding checkpoint"},
		{name: "no format", in: `{"stream":"s"}`, errContains: `no "format" field`},
		{name: "newer format", in: `{"format":3}`, is: ErrUnsupportedFormat, errContains: "upgrade this bridge"},
		{name: "schema id in format 1", in: strings.Replace(string(good), `"spans":[]}`, `"spans":[],"schema_id":3}`, 1),
			is: ErrInvalid, errContains: "format 1, but its content is format 2's"},
		{name: "unknown field", in: string(good[:len(good)-1]) + `,"extra":1}`, errContains: `unknown field "extra"`},
		{name: "trailing data", in: string(good) + `{}`, errContains: "after top-level value"},
		{name: "inconsistent", in: `{"format":1,"stream":"s","version":0,"fingerprint":"f","committed_at":"2026-01-01T00:00:00Z","control_offset":-1,"snapshot":{"next":0,"watermarks":[]},"batches":[]}`,
			is: ErrInvalid, errContains: "version is 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Unmarshal([]byte(tt.in))
			require.Error(t, err)
			assert.ErrorContains(t, err, tt.errContains)
			if tt.is != nil {
				assert.ErrorIs(t, err, tt.is)
			}
		})
	}
}

func TestValidateStream(t *testing.T) {
	for _, ok := range []string{"a", "erc20.transfers_v2-eth", "0"} {
		require.NoError(t, ValidateStream(ok), ok)
	}
	for _, bad := range []string{"", "A", "a/b", "a b", "ä", "{x}"} {
		assert.ErrorContains(t, ValidateStream(bad), "use one or more of a-z, 0-9", bad)
	}
}

func TestCheckpointValidate(t *testing.T) {
	tests := []struct {
		name        string
		mutate      func(*Checkpoint)
		errContains string
	}{
		{name: "valid", mutate: func(*Checkpoint) {}},
		{name: "bad stream", mutate: func(c *Checkpoint) { c.Stream = "Bad Stream" }, errContains: `stream id "Bad Stream" is not valid`},
		{name: "version 0", mutate: func(c *Checkpoint) { c.Version = 0 }, errContains: "version is 0"},
		{name: "no fingerprint", mutate: func(c *Checkpoint) { c.Fingerprint = "" }, errContains: "fingerprint is empty"},
		{name: "no time", mutate: func(c *Checkpoint) { c.CommittedAt = time.Time{} }, errContains: "committed_at is not set"},
		{name: "offset below none", mutate: func(c *Checkpoint) { c.ControlOffset = -2 }, errContains: "control_offset -2 is negative"},
		{name: "watermarks out of order", mutate: func(c *Checkpoint) { c.Snapshot.Watermarks[1].Seq = 8 },
			errContains: "watermark 1 has sequence 8, not after the previous one's 8"},
		{name: "watermark at next", mutate: func(c *Checkpoint) { c.Snapshot.Next = 11 }, errContains: "watermark 1 has sequence 11 but the next sequence is 11"},
		{name: "watermark without ranges", mutate: func(c *Checkpoint) { c.Snapshot.Watermarks[0].Ranges = nil }, errContains: "watermark 0 (sequence 8) has no ranges"},
		{name: "duplicate network", mutate: func(c *Checkpoint) {
			c.Snapshot.Watermarks[0].Ranges = []reorg.BlockRange{rng("x", 1, 2), rng("x", 3, 4)}
		}, errContains: `has two ranges for network "x"`},
		{name: "batch out of order", mutate: func(c *Checkpoint) { c.Batches[1].Seq = 8 }, errContains: "is not after the previous batch's sequence 8"},
		{name: "batch without watermark", mutate: func(c *Checkpoint) { c.Batches[1].Seq = 12 }, errContains: "has no retained watermark with its sequence"},
		{name: "batch ranges differ from its watermark", mutate: func(c *Checkpoint) { c.Batches[0].Seq = 11; c.Batches = c.Batches[:1] }, errContains: "differs from the ranges of watermark 11"},
		{name: "batch id mismatch", mutate: func(c *Checkpoint) { c.Batches[0].ID = "0000000000000000" }, errContains: "does not match its ranges, whose batch id is"},
		{name: "batch without ranges", mutate: func(c *Checkpoint) { c.Batches[0].Ranges = nil }, errContains: "has no ranges"},
		{name: "span without topic", mutate: func(c *Checkpoint) { c.Batches[0].Spans[0].Topic = "" }, errContains: "span 0 has no topic"},
		{name: "negative partition", mutate: func(c *Checkpoint) { c.Batches[0].Spans[1].Partition = -1 }, errContains: "span 1 has negative partition -1"},
		{name: "span reversed", mutate: func(c *Checkpoint) { c.Batches[0].Spans[0].Last = 9 }, errContains: "offsets 10..9; want 0 <= first <= last"},
		{name: "batches without watermarks", mutate: func(c *Checkpoint) { c.Snapshot.Watermarks = nil },
			errContains: "the snapshot has no committed watermark"},
		{name: "networks differ between watermarks", mutate: func(c *Checkpoint) {
			c.Snapshot.Watermarks[1].Ranges = c.Snapshot.Watermarks[1].Ranges[:1]
		}, errContains: "snapshot: reorg: snapshot watermarks seq 8 and 11 have different networks"},
		{name: "several problems at once", mutate: func(c *Checkpoint) { c.Version = 0; c.Fingerprint = "" },
			errContains: "version is 0 ...; fingerprint is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cp := goldenCheckpoint()
			tt.mutate(&cp)
			err := cp.Validate()
			if tt.errContains == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			if tt.name == "several problems at once" {
				var ve *ValidationError
				require.ErrorAs(t, err, &ve)
				assert.Len(t, ve.Problems, 2)
				return
			}
			assert.ErrorContains(t, err, tt.errContains)
			_, merr := Marshal(cp)
			assert.ErrorIs(t, merr, ErrInvalid, "Marshal validates")
		})
	}
}

func TestPartitionValidate(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name        string
		p           Partition
		errContains string
	}{
		{name: "valid", p: Partition{Stream: "s", From: 0, To: 10, Last: &reorg.Point{Number: 9}, UpdatedAt: now}},
		{name: "empty", p: Partition{Stream: "s", From: 10, To: 10, UpdatedAt: now}, errContains: "is empty; want from < to"},
		{name: "last outside", p: Partition{Stream: "s", From: 0, To: 10, Last: &reorg.Point{Number: 10}, UpdatedAt: now},
			errContains: "last block 10 is outside the partition [0, 10)"},
		{name: "bad stream", p: Partition{Stream: "", From: 0, To: 1, UpdatedAt: now}, errContains: "stream id"},
		{name: "no time", p: Partition{Stream: "s", From: 0, To: 1}, errContains: "updated_at is not set"},
		{name: "huge end", p: Partition{Stream: "s", From: 0, To: 1<<53 + 1, UpdatedAt: now}, errContains: "beyond 2^53"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.errContains == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			assert.ErrorContains(t, err, tt.errContains)
		})
	}
}

// TestMarshalMatchesEncodingJSON holds the hand-written encoder to what
// encoding/json writes for the same struct, including reorg's own JSON for
// ranges and strings that need escaping, so a change of reorg's JSON is
// caught here.
func TestMarshalMatchesEncodingJSON(t *testing.T) {
	odd := goldenCheckpoint()
	odd.Fingerprint = "sql=\"select <x> & y\"\n\t\u2028 é \x01"
	odd.Batches[0].Spans[0].Topic = "amp\\t"
	nilSlices := testCheckpoint("n", 1, 0)
	nilSlices.Snapshot.Watermarks, nilSlices.Batches = nil, nil
	nilSpans := testCheckpoint("n", 1, 2)
	nilSpans.Batches[0].Spans = nil
	handover := testCheckpoint("h", 1, 0)
	handover.Snapshot = reorg.NewHandover(map[string]uint64{"mainnet": 24_000_000, "base": 7})
	start := testCheckpoint("s", 1, 0)
	start.Snapshot = reorg.NewStart(map[string]uint64{"mainnet": 24_000_000})
	topicIDs := testCheckpoint("t", 1, 2)
	topicIDs.TopicIDs = map[string]string{"amp.txs": "9F3bYxq1T3-kX2gXoW7ycA", "a<b": "x"}
	nilSlicesIDs := nilSlices
	nilSlicesIDs.TopicIDs = map[string]string{"amp.txs": "id"}
	for name, cp := range map[string]Checkpoint{"golden": goldenCheckpoint(), "escapes": odd, "nil slices": nilSlices,
		"nil spans": nilSpans, "128 batches": testCheckpoint("big", 9, 128), "hand-over": handover,
		"start":     start,
		"topic ids": topicIDs, "nil slices, topic ids": nilSlicesIDs, "schema ids": goldenCheckpointV2()} {
		t.Run(name, func(t *testing.T) {
			got, err := Marshal(cp)
			require.NoError(t, err)
			cp.CommittedAt = cp.CommittedAt.UTC()
			want, err := json.Marshal(encoded{Format: formatOf(cp), Checkpoint: cp})
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
			back, err := Unmarshal(got)
			require.NoError(t, err)
			assert.Equal(t, cp, back)
		})
	}
}

func TestControlStateOf(t *testing.T) {
	cp := goldenCheckpoint()
	cp.ControlOffset = NoOffset // the copy in the transaction cannot know its own offset
	b, err := Marshal(cp)
	require.NoError(t, err)
	st, err := ControlStateOf(b, 77)
	require.NoError(t, err)
	assert.Equal(t, &ControlState{Offset: 77, Fingerprint: cp.Fingerprint, Snapshot: cp.Snapshot, Batches: cp.Batches}, st)

	cp.TopicIDs = map[string]string{"amp.txs": "9F3bYxq1T3-kX2gXoW7ycA"}
	b, err = Marshal(cp)
	require.NoError(t, err)
	st, err = ControlStateOf(b, 77)
	require.NoError(t, err)
	assert.Equal(t, cp.TopicIDs, st.TopicIDs, "the topic ids travel with the copy in the control event")

	_, err = ControlStateOf([]byte(`{"format":1}`), 78)
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "control event at offset 78")
}

// TestEncodedTypesUnchanged fails when a field is added to or removed from a
// type the hand-written encoder writes, so appendCheckpoint (and maybe
// FormatVersion) is updated with it. A zero-valued new field would otherwise
// be dropped silently.
func TestEncodedTypesUnchanged(t *testing.T) {
	fields := func(v any) []string {
		var out []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			out = append(out, rt.Field(i).Name)
		}
		return out
	}
	assert.Equal(t, []string{"Stream", "Version", "Fingerprint", "CommittedAt", "ControlOffset", "Snapshot", "Batches", "TopicIDs"}, fields(Checkpoint{}))
	assert.Equal(t, []string{"Seq", "ID", "Ranges", "Spans", "SchemaID"}, fields(Batch{}))
	assert.Equal(t, []string{"Topic", "Partition", "First", "Last"}, fields(Span{}))
	assert.Equal(t, []string{"Next", "Watermarks", "Incomplete", "Handover", "Start"}, fields(reorg.Snapshot{}), "reorg.Snapshot changed: update appendCheckpoint")
	assert.Equal(t, []string{"Seq", "Ranges"}, fields(reorg.Watermark{}), "reorg.Watermark changed: update appendCheckpoint")
	assert.Equal(t, []string{"Network", "Start", "End", "Hash", "PrevHash", "HasPrevHash", "Timestamp"}, fields(reorg.BlockRange{}),
		"reorg.BlockRange changed: update appendRanges")
}
