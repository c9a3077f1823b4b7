package main

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/stretchr/testify/assert"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
)

// TestSetMemoryLimit checks where the soft memory limit comes from:
// GOMEMLIMIT wins, then memory_limit (a size or off), then auto (the
// configured buffers, capped at 90% of the cgroup's limit).
func TestSetMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	noEnv := func(string) (string, bool) { return "", false }
	noCgroup := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	cfg := func(limit string) *config.Config {
		c := &config.Config{MemoryLimit: limit}
		c.Amp.ReadAheadBytes = 64 << 20
		c.Kafka.MaxBufferedBytes = 64 << 20
		return c
	}
	for _, tc := range []struct {
		name   string
		limit  string
		env    func(string) (string, bool)
		cgroup func() (uint64, error)
		want   memoryLimit
	}{
		{"auto without a cgroup limit: the configured buffers", "auto", noEnv, noCgroup, memoryLimit{224 << 20, "auto"}},
		{"auto under a large cgroup limit", "auto", noEnv, func() (uint64, error) { return 4 << 30, nil }, memoryLimit{224 << 20, "auto"}},
		{"auto capped by a small cgroup limit", "auto", noEnv, func() (uint64, error) { return 200 << 20, nil }, memoryLimit{180 << 20, "cgroup"}},
		{"auto when the cgroup cannot be read", "auto", noEnv, func() (uint64, error) { return 0, errors.New("permission denied") }, memoryLimit{224 << 20, "auto"}},
		{"a size", "100MiB", noEnv, noCgroup, memoryLimit{100 << 20, "memory_limit"}},
		{"off", "off", noEnv, noCgroup, memoryLimit{math.MaxInt64, "off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := setMemoryLimit(cfg(tc.limit), tc.env, tc.cgroup, log)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.want.Bytes, debug.SetMemoryLimit(-1), "the runtime's limit")
		})
	}
	t.Run("GOMEMLIMIT wins", func(t *testing.T) {
		debug.SetMemoryLimit(300 << 20) // as the runtime would have read it
		env := func(k string) (string, bool) { return "300MiB", k == "GOMEMLIMIT" }
		got := setMemoryLimit(cfg("100MiB"), env, noCgroup, log)
		assert.Equal(t, memoryLimit{300 << 20, "GOMEMLIMIT"}, got)
		assert.Equal(t, int64(300<<20), debug.SetMemoryLimit(-1))
	})
}
