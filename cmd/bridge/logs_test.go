package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// logBuffer collects what the bridge's goroutines write (JSON log lines, a
// command's output), safe for concurrent use: the go-redis and gRPC
// adapters are process-global (liblog), so a client of an earlier or a
// parallel command may still log into a command's stderr while a test
// reads it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns every line, decoded.
func (b *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(b.buf.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

// processLevel reports whether a log line belongs to the process, not to
// a stream: the lines of the clients every stream shares, made before or
// outside any stream (cmd/bridge connect).
func processLevel(m map[string]any) bool {
	msg, _ := m["msg"].(string)
	switch {
	case msg == "redis durability checked", // the checkpoint store, opened once
		strings.HasPrefix(msg, "could not check redis durability"),
		strings.HasPrefix(msg, "redis durability is weaker"),
		msg == "bridge starting":
		return true
	}
	// The shared Kafka admin client's own franz-go lines (its connection
	// to the brokers is every stream's).
	return m["client"] == "admin"
}

// TestEveryStreamLogLineNamesItsStream runs two streams through a reorg
// and a dropped Amp connection, at debug level, and checks that each line
// they log carries the stream's id, the shared Flight client's reconnect
// warnings included.
func TestEveryStreamLogLineNamesItsStream(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 20}, MaxMicrobatchBlocks: 5}, 128)
	second := h.cfg.Streams[0]
	second.ID += "-b"
	second.Topic += "-b"
	h.cfg.Streams = append(h.cfg.Streams, second)
	logs := &logBuffer{}
	h.log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	stop := h.run()
	waitBoth := func() {
		t.Helper()
		head, _ := h.sim.Head()
		require.Eventually(t, func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.lastOf[h.cfg.Streams[0].ID] >= head && h.lastOf[second.ID] >= head
		}, 60*time.Second, 10*time.Millisecond, "both streams commit head block %d", head)
	}
	waitBoth()
	require.NoError(t, h.sim.Reorg(3, 4))
	waitBoth()
	h.sim.DropConnections()
	h.sim.Mine(3)
	waitBoth()
	require.NoError(t, stop())

	ids := map[string]bool{h.cfg.Streams[0].ID: true, second.ID: true}
	seen := map[string]int{}
	msgs := map[string]bool{}
	for _, m := range logs.records(t) {
		if processLevel(m) {
			continue
		}
		id, _ := m["stream"].(string)
		if !assert.True(t, ids[id], "a log line without its stream: %v", m) {
			continue
		}
		seen[id]++
		msgs[m["msg"].(string)] = true
	}
	assert.Len(t, seen, 2, "both streams logged")
	for _, want := range []string{"reorg", "opening the Amp stream", "amp stream failed; reconnecting", "kafka producer ready", "created topic"} {
		assert.True(t, msgs[want], "a stream logged %q", want)
	}
	t.Logf("lines per stream %v; messages %v", seen, msgs)
}
