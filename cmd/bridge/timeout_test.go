package main

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// silentServer accepts TCP connections and holds them without ever
// answering: a service that is up at the network level but hung.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// TestStatusTimeoutNamesAmp: `bridge status` of a stream with a checkpoint
// asks Amp for its head; against an Amp that accepts connections and never
// answers it ends within -timeout, printing what the checkpoint store said
// and failing with an error that names Amp and its address.
func TestStatusTimeoutNamesAmp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 5}}, 128)
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())

	amp := silentServer(t)
	sc := h.cfg.Streams[0]
	args := []string{"status", "-c", writeConfig(t, minimalYAML), "-timeout", "1s",
		"-set", "amp.addr=" + amp,
		"-set", "checkpoint.store=redis", "-set", "checkpoint.redis.addr=" + h.cfg.Checkpoint.Redis.Addr,
		"-set", "checkpoint.redis.key_prefix=" + h.cfg.Checkpoint.Redis.KeyPrefix,
		"-set", "streams.0.id=" + sc.ID, "-set", "streams.0.sql=" + sc.SQL, "-set", "streams.0.topic=" + sc.Topic}
	var out, errOut logBuffer
	start := time.Now()
	code := run(t.Context(), args, &out, &errOut)
	took := time.Since(start)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Equal(t, 1, code)
	assert.Less(t, took, 5*time.Second, "status ends at its -timeout")
	assert.Contains(t, out.String(), sc.ID+": cursor ", "what the checkpoint store said is printed")
	assert.Contains(t, errOut.String(), "amp at "+amp+" did not answer")
}

// TestNoAnswerNamesTheService: every operator command takes -timeout, and
// a connection that hangs on Kafka or Redis says which.
func TestNoAnswerNamesTheService(t *testing.T) {
	silent := silentServer(t)
	tests := []struct {
		name        string
		args        []string
		errContains string
	}{
		{name: "schema, amp", args: []string{"schema", "-set", "amp.addr=" + silent}, errContains: "amp at " + silent + " did not answer"},
		{name: "verify, kafka", args: []string{"verify", "-set", "kafka.brokers=" + silent}, errContains: "kafka at " + silent + " did not answer"},
		{name: "rewind, kafka", args: []string{"rewind", "-stream", "txs", "-to-block", "1", "-set", "kafka.brokers=" + silent},
			errContains: "kafka at " + silent + " did not answer"},
		{name: "status, redis", args: []string{"status", "-set", "checkpoint.store=redis", "-set", "checkpoint.redis.addr=" + silent},
			errContains: "checkpoint store redis at " + silent + " did not answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut logBuffer
			args := append([]string{tt.args[0], "-c", writeConfig(t, minimalYAML), "-timeout", "500ms"}, tt.args[1:]...)
			start := time.Now()
			code := run(t.Context(), args, &out, &errOut)
			assert.Equal(t, 1, code, errOut.String())
			assert.Less(t, time.Since(start), 5*time.Second)
			assert.Contains(t, errOut.String(), tt.errContains)
			t.Log(errOut.String())
		})
	}
}
