package source

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

func hashN(n uint64) reorg.Hash {
	var h reorg.Hash
	binary.BigEndian.PutUint64(h[24:], n)
	h[0] = 0xab
	return h
}

// The example of amp-protocol.md §2.1 (with concrete hashes), byte for byte.
const golden = `{"ranges":[{"numbers":{"start":100,"end":102},"network":"mainnet",` +
	`"hash":"0xab00000000000000000000000000000000000000000000000000000000000066",` +
	`"prev_hash":"0xab00000000000000000000000000000000000000000000000000000000000063",` +
	`"timestamp":1765585559}],"ranges_complete":false}`

func TestAppMetadata_Golden(t *testing.T) {
	want := AppMetadata{Ranges: []reorg.BlockRange{{
		Network: "mainnet", Start: 100, End: 102, Hash: hashN(102), PrevHash: hashN(99), HasPrevHash: true, Timestamp: 1765585559,
	}}}
	got, err := ParseAppMetadata([]byte(golden))
	require.NoError(t, err)
	assert.Equal(t, want, got)
	b, err := want.MarshalJSON()
	require.NoError(t, err)
	assert.Equal(t, golden, string(b))

	b, err = AppMetadata{Complete: true}.MarshalJSON()
	require.NoError(t, err)
	assert.Equal(t, `{"ranges":[],"ranges_complete":true}`, string(b))
}

func TestParseAppMetadata(t *testing.T) {
	h := hashN(5).String()
	tests := []struct {
		name        string
		in          string
		want        AppMetadata
		field       string // wanted MetadataError.Field
		errContains string
	}{
		{name: "empty means no ranges, not complete", in: ""},
		{name: "empty ranges complete (A17)", in: `{"ranges":[],"ranges_complete":true}`, want: AppMetadata{Complete: true}},
		{name: "genesis null prev_hash", in: `{"ranges":[{"numbers":{"start":0,"end":5},"network":"eth","hash":"` + h + `","prev_hash":null}],"ranges_complete":true}`,
			want: AppMetadata{Complete: true, Ranges: []reorg.BlockRange{{Network: "eth", Start: 0, End: 5, Hash: hashN(5)}}}},
		{name: "absent prev_hash and timestamp, unknown keys ignored", in: `{"x":1,"ranges":[{"numbers":{"start":1,"end":5},"network":"eth","hash":"` + h + `","extra":[1]}],"ranges_complete":false}`,
			want: AppMetadata{Ranges: []reorg.BlockRange{{Network: "eth", Start: 1, End: 5, Hash: hashN(5)}}}},
		{name: "not json", in: `{"ranges":`, errContains: "decoding JSON object"},
		{name: "not an object", in: `[1]`, errContains: "decoding JSON object"},
		{name: "null", in: `null`, errContains: "null"},
		{name: "missing ranges", in: `{"ranges_complete":false}`, field: "ranges", errContains: "missing"},
		{name: "null ranges", in: `{"ranges":null,"ranges_complete":false}`, field: "ranges", errContains: "missing"},
		{name: "ranges not an array", in: `{"ranges":{},"ranges_complete":false}`, field: "ranges"},
		{name: "missing ranges_complete", in: `{"ranges":[]}`, field: "ranges_complete", errContains: "missing"},
		{name: "ranges_complete not bool", in: `{"ranges":[],"ranges_complete":"true"}`, field: "ranges_complete", errContains: "boolean"},
		{name: "range not an object", in: `{"ranges":[7],"ranges_complete":false}`, field: "ranges[0]"},
		{name: "missing numbers", in: `{"ranges":[{"network":"eth","hash":"` + h + `"}],"ranges_complete":false}`, field: "ranges[0].numbers"},
		{name: "missing end", in: `{"ranges":[{"numbers":{"start":1},"network":"eth","hash":"` + h + `"}],"ranges_complete":false}`, field: "ranges[0].numbers.end"},
		{name: "negative start", in: `{"ranges":[{"numbers":{"start":-1,"end":2},"network":"eth","hash":"` + h + `"}],"ranges_complete":false}`, field: "ranges[0].numbers.start"},
		{name: "start after end", in: `{"ranges":[{"numbers":{"start":3,"end":2},"network":"eth","hash":"` + h + `"}],"ranges_complete":false}`, field: "ranges[0].numbers", errContains: "after end"},
		{name: "empty network", in: `{"ranges":[{"numbers":{"start":1,"end":2},"network":"","hash":"` + h + `"}],"ranges_complete":false}`, field: "ranges[0].network"},
		{name: "missing hash", in: `{"ranges":[{"numbers":{"start":1,"end":2},"network":"eth"}],"ranges_complete":false}`, field: "ranges[0].hash"},
		{name: "short hash", in: `{"ranges":[{"numbers":{"start":1,"end":2},"network":"eth","hash":"0x12"}],"ranges_complete":false}`, field: "ranges[0].hash"},
		{name: "unprefixed prev_hash", in: `{"ranges":[{"numbers":{"start":1,"end":2},"network":"eth","hash":"` + h + `","prev_hash":"` + h[2:] + `"}],"ranges_complete":false}`, field: "ranges[0].prev_hash"},
		{name: "bad timestamp", in: `{"ranges":[{"numbers":{"start":1,"end":2},"network":"eth","hash":"` + h + `","timestamp":"now"}],"ranges_complete":false}`, field: "ranges[0].timestamp"},
		{name: "second range bad", in: `{"ranges":[{"numbers":{"start":1,"end":2},"network":"eth","hash":"` + h + `"},{"numbers":{"start":1,"end":2},"network":7,"hash":"` + h + `"}],"ranges_complete":false}`, field: "ranges[1].network"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAppMetadata([]byte(tt.in))
			if tt.field == "" && tt.errContains == "" {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			var me *MetadataError
			require.ErrorAs(t, err, &me)
			assert.Equal(t, tt.field, me.Field)
			assert.Equal(t, -1, me.Index)
			assert.ErrorIs(t, err, ErrPermanent)
			if tt.errContains != "" {
				assert.ErrorContains(t, err, tt.errContains)
			}
		})
	}
}

// FuzzAppMetadata checks the app_metadata parser. Invariants:
//   - it never panics;
//   - a rejected input yields a *MetadataError;
//   - an accepted input re-marshals to JSON that parses to the same value,
//     and marshalling that value again gives the same bytes.
//
// The seed corpus is in testdata/fuzz/FuzzAppMetadata.
func FuzzAppMetadata(f *testing.F) {
	f.Add([]byte(golden))
	f.Add([]byte(``))
	f.Add([]byte(`{"ranges":[],"ranges_complete":true}`))
	f.Add([]byte(`{"ranges":[{"numbers":{"start":0,"end":0},"network":"anvil","hash":"0x` +
		`0000000000000000000000000000000000000000000000000000000000000001","prev_hash":null}],"ranges_complete":false}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := ParseAppMetadata(in)
		if err != nil {
			var me *MetadataError
			if !errors.As(err, &me) {
				t.Fatalf("error %v is not a *MetadataError", err)
			}
			return
		}
		b, err := m.MarshalJSON()
		if err != nil {
			t.Fatalf("marshalling accepted %q: %v", in, err)
		}
		m2, err := ParseAppMetadata(b)
		if err != nil {
			t.Fatalf("re-parsing %q (from %q): %v", b, in, err)
		}
		if !assert.ObjectsAreEqual(m, m2) {
			t.Fatalf("round trip changed the value:\n%#v\n%#v", m, m2)
		}
		b2, err := m2.MarshalJSON()
		if err != nil || string(b2) != string(b) {
			t.Fatalf("marshal not stable: %q vs %q (%v)", b, b2, err)
		}
	})
}

// FuzzAppMetadataFastPath checks that the hand-written scanner agrees with
// the strict encoding/json parser. Invariants:
//   - the scanner never panics;
//   - whatever it accepts, the strict parser accepts with the same value
//     (so the fast path can never let through what the strict one rejects).
//
// The seeds are FuzzAppMetadata's plus TestParseAppMetadata's cases.
func FuzzAppMetadataFastPath(f *testing.F) {
	h := hashN(5).String()
	for _, s := range []string{
		golden, ``, `{"ranges":[],"ranges_complete":true}`, ` { "ranges" : [ ] , "ranges_complete" : false } `,
		`{"ranges_complete":true,"ranges":[{"hash":"` + h + `","network":"eth","numbers":{"end":5,"start":0}}]}`,
		`{"ranges":[{"numbers":{"start":0,"end":5},"network":"eth","hash":"` + h + `","prev_hash":null,"timestamp":null}],"ranges_complete":true}`,
		`{"ranges":[{"numbers":{"start":0,"end":5},"network":"eth","hash":"` + strings.ToUpper(h) + `"}],"ranges_complete":true}`,
		`{"ranges":[{"numbers":{"start":1,"end":2},"network":"eth","hash":"` + h + `"},{"numbers":{"start":3,"end":4},"network":"base","hash":"` + h + `"}],"ranges_complete":false}`,
		`{"ranges":[{"numbers":{"start":18446744073709551615,"end":18446744073709551615},"network":"eth","hash":"` + h + `"}],"ranges_complete":false}`,
		`{"ranges":[{"numbers":{"start":18446744073709551616,"end":1},"network":"eth","hash":"` + h + `"}],"ranges_complete":false}`,
		`{"ranges":[{"numbers":{"start":01,"end":2},"network":"eth","hash":"` + h + `"}],"ranges_complete":false}`,
		`{"ranges":[{"numbers":{"start":1.0,"end":2},"network":"eth","hash":"` + h + `"}],"ranges_complete":false}`,
		`{"ranges":[{"numbers":{"start":1,"end":2},"network":"e\u0074h","hash":"` + h + `"}],"ranges_complete":false}`,
		`{"ranges":[{"numbers":{"start":3,"end":2},"network":"eth","hash":"` + h + `"}],"ranges_complete":false}`,
		`{"ranges":[],"ranges_complete":true,"ranges_complete":false}`, `{"ranges":[],"ranges_complete":true}x`, `{}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fast, ok := scanAppMetadata(in)
		if !ok {
			return
		}
		strict, err := parseAppMetadataStrict(in)
		if err != nil {
			t.Fatalf("the scanner accepted %q, which the strict parser rejects: %v", in, err)
		}
		if !assert.ObjectsAreEqual(strict, fast) {
			t.Fatalf("the scanner and the strict parser disagree on %q:\nscanner %#v\nstrict  %#v", in, fast, strict)
		}
	})
}

// TestScanAppMetadata_TakesTheFastPath checks that what Amp sends (the
// golden example, a genesis range, an empty completion) is read by the
// scanner, not only by the strict fallback, so that the benchmark figure is
// the scanner's.
func TestScanAppMetadata_TakesTheFastPath(t *testing.T) {
	for _, in := range []string{golden, `{"ranges":[],"ranges_complete":true}`,
		`{"ranges":[{"numbers":{"start":0,"end":0},"network":"anvil","hash":"0x` +
			`0000000000000000000000000000000000000000000000000000000000000001","prev_hash":null}],"ranges_complete":false}`} {
		m, ok := scanAppMetadata([]byte(in))
		require.True(t, ok, "%s", in)
		want, err := parseAppMetadataStrict([]byte(in))
		require.NoError(t, err)
		assert.Equal(t, want, m)
	}
}

func BenchmarkParseAppMetadata(b *testing.B) {
	for _, p := range []struct {
		name  string
		parse func([]byte) (AppMetadata, error)
	}{{"scanner", ParseAppMetadata}, {"strict", parseAppMetadataStrict}} {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := p.parse([]byte(golden)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
