package source_test

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// TestMessageMemoryReuse: the memory of a record batch's message goes back
// to the Client when its envelope is released, and only then. A message
// received later may reuse it; an envelope still held keeps its rows,
// and one released twice (itself and a copy) gives its memory back once,
// so that two envelopes held at once never share it.
func TestMessageMemoryReuse(t *testing.T) {
	const n, pad = 40, 64 << 10
	var msgs []msg
	for i := range n {
		rec := makeRecord(memory.NewGoAllocator(), uint64(i), 1, pad)
		t.Cleanup(rec.Release)
		msgs = append(msgs, msg{rec: rec, md: md(t, false, R(uint64(i), uint64(i), 0))})
	}
	srv := newScriptServer(attemptScript{msgs: msgs, hang: true})
	c := newClient(t, serve(t, srv), func(c *source.Config) { c.ReadAhead = 1 }, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT 1", fixedCursor(nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	// row checks that env holds message i's row and returns where the
	// row's bytes live.
	row := func(env source.Envelope, i int) *byte {
		t.Helper()
		require.Equal(t, source.KindBatch, env.Kind)
		col := env.Batch.Column(1).(*array.String)
		got, want := col.Value(0), fmt.Sprintf("row-%d-0", i)+strings.Repeat("x", pad)
		if got != want { // not require.Equal: its diff of 64 KiB rows is unreadable
			t.Fatalf("message %d's row is %.20q… (%d bytes), not %.20q…", i, got, len(got), want)
		}
		return unsafe.StringData(col.Value(0))
	}

	kept := take(t, s) // held to the end
	keptAt := row(kept, 0)
	released := map[*byte]bool{}
	reused := 0
	next := 1
	// Released one by one: later messages reuse their memory, never the
	// held one's.
	for ; next < n/2; next++ {
		env := take(t, s)
		at := row(env, next)
		require.NotSame(t, keptAt, at, "message %d reuses the memory of a held envelope", next)
		if released[at] {
			reused++
		}
		released[at] = true
		dup := env
		env.Release()
		dup.Release() // a copy released too: given back once
	}
	assert.Positive(t, reused, "no message reused the memory of a released one")
	// Held together: each keeps its own row.
	var held []source.Envelope
	for ; next < n; next++ {
		held = append(held, take(t, s))
	}
	for i, env := range held {
		row(env, n/2+i)
		env.Release()
	}
	row(kept, 0)
	kept.Release()
}
