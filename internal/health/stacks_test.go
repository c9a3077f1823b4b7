package health

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parkedInStream blocks until release is closed, under stream's label.
func parkedInStream(ctx context.Context, stream string, parked chan<- struct{}, release <-chan struct{}) {
	Labelled(ctx, stream, func(context.Context) {
		parked <- struct{}{}
		<-release
	})
}

// TestStacksOfALabelledStream: the goroutines run under a stream's label,
// and those they start, are that stream's stacks; an unlabelled goroutine
// and another stream's are not.
func TestStacksOfALabelledStream(t *testing.T) {
	// Names of this run's own: goroutines of an earlier run (-count) may
	// not have ended yet.
	s1, s2, s3 := rand.Text(), rand.Text(), rand.Text()
	release := make(chan struct{})
	defer close(release)
	parked := make(chan struct{})
	go parkedInStream(t.Context(), s1, parked, release)
	<-parked
	go Labelled(t.Context(), s2, func(context.Context) {
		go func() { parked <- struct{}{}; <-release }() // inherits s2
		<-release
	})
	<-parked
	go func() { parked <- struct{}{}; <-release }() // no label
	<-parked

	got := Stacks([]string{s1, s2, s3})
	require.Len(t, got[s1], 1, got)
	assert.Regexp(t, `^1 goroutine: .*parkedInStream.* \(stacks_test\.go:\d+\) < .*Labelled \(stacks\.go:\d+\) < .*parkedInStream \(stacks_test\.go:\d+\)`, got[s1][0])
	assert.Len(t, got[s2], 2, "s2's goroutine and the one it started: %v", got[s2])
	assert.NotContains(t, got, s3)
	for _, s := range got[s2] {
		assert.NotContains(t, s, "parkedInStream")
	}
}

// TestStacksInTheFirstRecord: a stream's goroutine whose record is the
// profile's first (after its "goroutine profile: total N" line) is counted
// and condensed as the others are.
func TestStacksInTheFirstRecord(t *testing.T) {
	const profile = `goroutine profile: total 3
2 @ 0x47e2ae 0x4a1b2c
# labels: {"stream":"s1"}
#	0x4a1b2b	example.com/bridge/sink.(*Reader).fetchOnce+0x2a	/src/sink/reader.go:812
#	0x4a1b2c	runtime.goexit+0x1	/go/src/runtime/asm_amd64.s:1700

1 @ 0x47e2ae 0x4a1b2d
# labels: {"other":"x", "stream":"s2"}
#	0x4a1b2d	example.com/bridge/internal/pipeline.(*Stream).commit+0x2a	/src/internal/pipeline/stream.go:1422
`
	got := stacksIn(profile, []string{"s1", "s2"})
	assert.Equal(t, map[string][]string{
		"s1": {"2 goroutines: sink.(*Reader).fetchOnce (reader.go:812)"},
		"s2": {"1 goroutine: pipeline.(*Stream).commit (stream.go:1422)"},
	}, got)
}
