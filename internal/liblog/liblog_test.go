package liblog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLibraryLoggers: go-redis's and gRPC's lines reach the command's
// logger as structured records in its format, gRPC's Info only at Debug.
// (The adapters are tested on their own libraryLog: installing them into
// the libraries is main's, before any gRPC call.)
func TestLibraryLoggers(t *testing.T) {
	var ll libraryLog
	redisLogger{&ll}.Printf(t.Context(), "dropped before a logger is set")
	for _, lvl := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		ll.l.Store(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: lvl})))
		redisLogger{&ll}.Printf(t.Context(), "redis: discarding bad conn: %v", "EOF")
		g := grpcLogger{&ll}
		g.Infof("[core] channel %d created", 1)
		g.Warningln("[transport] closing", "conn")
		g.Error("x")
		var got []string
		for line := range strings.Lines(buf.String()) {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &m), line)
			got = append(got, m["level"].(string)+" "+m["component"].(string)+" "+m["msg"].(string))
		}
		want := []string{"WARN redis redis: discarding bad conn: EOF"}
		if lvl == slog.LevelDebug {
			want = append(want, "DEBUG grpc [core] channel 1 created")
		}
		want = append(want, "WARN grpc [transport] closing conn", "ERROR grpc x")
		assert.Equal(t, want, got, "level %v", lvl)
		assert.Equal(t, lvl == slog.LevelDebug, g.V(0))
		assert.False(t, g.V(2))
	}
}
