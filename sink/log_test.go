package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a bytes.Buffer safe for franz-go's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// levels counts the JSON log lines per level, and the messages at INFO.
func (b *lockedBuffer) levels(t *testing.T) (map[string]int, []string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	n := map[string]int{}
	var infos []string
	for line := range strings.Lines(b.buf.String()) {
		var rec struct{ Level, Msg string }
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		n[rec.Level]++
		if rec.Level == "INFO" {
			infos = append(infos, rec.Msg)
		}
	}
	return n, infos
}

func TestKgoLevels(t *testing.T) {
	var buf bytes.Buffer
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	h := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: noTime})
	l := kgoLogger(slog.New(h).With("stream", "s"))
	ctx := context.Background()
	assert.False(t, l.Enabled(ctx, slog.LevelDebug), "franz-go's debug lines are below the bridge's debug")
	assert.True(t, l.Enabled(ctx, slog.LevelInfo), "franz-go's info lines show at the bridge's debug")
	l.Info("beginning transaction")
	l.Warn("w")
	l.Error("e")
	assert.Equal(t, "level=DEBUG msg=\"beginning transaction\" stream=s\nlevel=WARN msg=w stream=s\nlevel=ERROR msg=e stream=s\n", buf.String())
}

// TestInfoLinesDoNotGrowWithCommits: a producer's INFO lines at the
// bridge's default level are a constant few (connecting, ready), not some
// per transaction. Before franz-go's levels were mapped, 100 commits logged
// 407 INFO lines and 10 commits 47 (now 1 each): kgo's "beginning transaction",
// "flushing", "ending transaction", "end transaction response"… for each.
func TestInfoLinesDoNotGrowWithCommits(t *testing.T) {
	_, cfg := newCluster(t)
	createTopic(t, cfg, "data", 1)
	infos := map[int]int{}
	for _, n := range []int{10, 100} {
		var buf lockedBuffer
		p := newProducer(t, cfg, fmt.Sprintf("s%d", n), Deps{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
		for i := range n {
			_ = produceBatches(t, p, "data", 1, fmt.Sprintf("n%d-%d", n, i))
		}
		require.NoError(t, p.Close(testCtx(t)))
		levels, msgs := buf.levels(t)
		t.Logf("%d commits: lines per level %v; INFO: %q", n, levels, msgs)
		infos[n] = levels["INFO"]
	}
	assert.Equal(t, infos[10], infos[100], "INFO lines must not grow with the number of commits")
	assert.LessOrEqual(t, infos[100], 3)
}
