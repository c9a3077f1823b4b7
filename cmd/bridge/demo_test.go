package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDemoVerifies runs the README's first command, shortened: it must
// publish, retract after reorgs, and end with a clean verification.
func TestDemoVerifies(t *testing.T) {
	t.Parallel()
	var out, errOut logBuffer
	err := runDemo(t.Context(), demoOptions{duration: 2 * time.Second, blockEvery: 100 * time.Millisecond,
		reorgEvery: 4, reorgDepth: 2, txPerBlock: 5}, &out, &errOut)
	t.Log(out.String())
	require.NoError(t, err, errOut.String())
	assert.Contains(t, out.String(), "publish ")
	assert.Contains(t, out.String(), "retract ")
	assert.Contains(t, out.String(), "verdict: OK")
}

func TestDemoRejectsBadFlags(t *testing.T) {
	var out, errOut logBuffer
	code := run(t.Context(), []string{"demo", "-duration", "0s"}, &out, &errOut)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut.String(), "-duration")
}
