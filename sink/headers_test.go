package sink

import (
	"fmt"
	"testing"
)

// BenchmarkHeaders is Producer.headers on the bridge's five headers, as
// every record of a batch passes them: the same slice, record after record
// (same), and a copy of it with equal contents in other memory (equal).
func BenchmarkHeaders(b *testing.B) {
	hs := []Header{
		{Key: "amp-batch-id", Value: []byte("0123456789abcdef0123456789abcdef")},
		{Key: HeaderOp, Value: []byte("c")},
		{Key: "amp-network", Value: []byte("mainnet")},
		{Key: "amp-range", Value: []byte("100-199")},
		{Key: "amp-stream", Value: []byte("transactions")},
	}
	equal := make([]Header, len(hs))
	for i, h := range hs {
		equal[i] = Header{Key: fmt.Sprint(h.Key), Value: append([]byte(nil), h.Value...)}
	}
	for _, c := range []struct {
		name string
		next []Header
	}{{"same", hs}, {"equal", equal}} {
		b.Run(c.name, func(b *testing.B) {
			var p Producer
			p.headers(hs)
			var op string
			for b.Loop() {
				_, op = p.headers(c.next)
			}
			if op != "c" {
				b.Fatalf("op %q, want c", op)
			}
		})
	}
}

// TestSameHeaders checks the comparison of a record's headers with the
// previous record's: the very same keys and values match by their pointers,
// equal ones in other memory by their bytes, and a header that differs in
// length (also over the same memory) or in content does not match.
func TestSameHeaders(t *testing.T) {
	hs := []Header{{Key: "amp-batch-id", Value: []byte("b-1")}, {Key: HeaderOp, Value: []byte("c")}}
	for name, other := range map[string][]Header{
		"a copy of the slice":            {hs[0], hs[1]},
		"an equal value in other memory": {hs[0], {Key: HeaderOp, Value: []byte("c")}},
		"an equal key in other memory":   {{Key: fmt.Sprint("amp-batch-", "id"), Value: hs[0].Value}, hs[1]},
	} {
		if !sameHeaders(hs, other) {
			t.Errorf("%s: not the same, want the same", name)
		}
	}
	for name, other := range map[string][]Header{
		"a shorter value, same memory": {{Key: hs[0].Key, Value: hs[0].Value[:2]}, hs[1]},
		"another value":                {hs[0], {Key: HeaderOp, Value: []byte("d")}},
		"another key":                  {{Key: "amp-batch-ix", Value: hs[0].Value}, hs[1]},
		"fewer headers":                hs[:1],
	} {
		if sameHeaders(hs, other) {
			t.Errorf("%s: the same, want not", name)
		}
	}
}
