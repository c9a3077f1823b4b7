package sink

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// BenchmarkHeaders is Producer.headers on the bridge's five headers, as
// every record of a batch passes them: the same slice, record after record
// (same), and, after the previous batch's, a copy of them with equal
// contents in other memory, record after record (equal: what the records
// of the next Flight message of a batch Amp split pass).
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

// TestCompareHeaders checks the comparison of a record's headers with the
// previous record's: the very same keys and values match by their pointers
// (same), equal ones in other memory by their bytes (equal, not same), and
// a header that differs in length (also over the same memory) or in content
// does not match.
func TestCompareHeaders(t *testing.T) {
	hs := []Header{{Key: "amp-batch-id", Value: []byte("b-1")}, {Key: HeaderOp, Value: []byte("c")}}
	for name, c := range map[string]struct {
		other       []Header
		equal, same bool
	}{
		"a copy of the slice":            {[]Header{hs[0], hs[1]}, true, true},
		"an equal value in other memory": {[]Header{hs[0], {Key: HeaderOp, Value: []byte("c")}}, true, false},
		"an equal key in other memory":   {[]Header{{Key: fmt.Sprint("amp-batch-", "id"), Value: hs[0].Value}, hs[1]}, true, false},
		"a shorter value, same memory":   {[]Header{{Key: hs[0].Key, Value: hs[0].Value[:2]}, hs[1]}, false, false},
		"another value":                  {[]Header{hs[0], {Key: HeaderOp, Value: []byte("d")}}, false, false},
		"another key":                    {[]Header{{Key: "amp-batch-ix", Value: hs[0].Value}, hs[1]}, false, false},
		"fewer headers":                  {hs[:1], false, false},
	} {
		equal, same := compareHeaders(hs, c.other)
		if equal != c.equal || same != c.same {
			t.Errorf("%s: equal %v, same %v; want %v, %v", name, equal, same, c.equal, c.same)
		}
	}
}

// TestHeadersTakeOnNewMemory checks that headers equal to the previous
// record's but in other memory (the next message of a batch Amp split) are
// taken on: the records after it match by their pointers, and keep the op.
func TestHeadersTakeOnNewMemory(t *testing.T) {
	first := []Header{{Key: "amp-batch-id", Value: []byte("b-1")}, {Key: HeaderOp, Value: []byte("c")}}
	next := []Header{{Key: "amp-batch-id", Value: []byte("b-1")}, {Key: HeaderOp, Value: []byte("c")}}
	var p Producer
	p.headers(first)
	got, op := p.headers(next)
	assert.Equal(t, "c", op)
	require.Len(t, got, 2)
	for i := range got {
		assert.Same(t, unsafe.SliceData(next[i].Value), unsafe.SliceData(got[i].Value), "header %d is not next's memory", i)
	}
	_, same := compareHeaders(next, p.hdr)
	assert.True(t, same, "the records after the first of next's do not match by their pointers")
	_, op = p.headers([]Header{first[0], {Key: HeaderOp, Value: []byte("d")}})
	assert.Equal(t, "d", op, "other headers set the op anew")
}
