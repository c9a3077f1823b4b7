package offsets

import (
	"errors"
	"os"
	"testing"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// benchBatches is the retained batch log size of the benchmark checkpoint
// (the default retention of 128 blocks as one-block batches).
const benchBatches = 128

// BenchmarkCommit measures the latency of one checkpoint commit (encode,
// compare-and-set, durable write) with 128 retained batches, on miniredis,
// on the real redis-server named by BRIDGE_TEST_REDIS_ADDR (skipped when
// unset), on a private redis-server with appendfsync always (skipped without
// a redis-server binary), and on the embedded file store.
func BenchmarkCommit(b *testing.B) {
	run := func(b *testing.B, s Store) {
		b.Run("batches=1", func(b *testing.B) { benchCommit(b, s, "bench1", 1) })
		b.Run("batches=128", func(b *testing.B) { benchCommit(b, s, "bench", benchBatches) })
	}
	real := false
	for _, be := range testenv.RedisBackends(b) {
		real = real || be.Real
		b.Run(be.Name, func(b *testing.B) { run(b, newRedisStore(b, be.Addr, discardLogger())) })
	}
	if !real {
		b.Run("real-redis", func(b *testing.B) {
			b.Skipf("real redis not configured: set %s (run `make services` and source .local/stack.env)", testenv.EnvRedisAddr)
		})
	}
	b.Run("redis-server-always", func(b *testing.B) {
		srv := testenv.StartRedisServer(b)
		run(b, newRedisStore(b, srv.Addr(), discardLogger()))
	})
	b.Run("file", func(b *testing.B) {
		dir, err := os.MkdirTemp("", "offsets-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(dir) })
		s, err := NewFileStore(dir, discardLogger())
		if err != nil {
			b.Fatal(err)
		}
		run(b, s)
	})
}

// benchCommit commits successive versions of a checkpoint with n retained
// batches, continuing after what an earlier round of the same benchmark
// stored.
func benchCommit(b *testing.B, s Store, stream string, n int) {
	cp := testCheckpoint(stream, 1, n)
	enc, err := Marshal(cp)
	if err != nil {
		b.Fatal(err)
	}
	var base uint64
	if prev, err := s.Load(b.Context(), stream); err == nil {
		base = prev.Version
	} else if !errors.Is(err, ErrNotFound) {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		cp.Version = base + uint64(i) + 1
		if err := s.Commit(b.Context(), cp); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(enc)), "checkpoint_bytes")
}

// BenchmarkMarshal measures encoding alone, the part of a commit spent
// before any I/O.
func BenchmarkMarshal(b *testing.B) {
	cp := testCheckpoint("bench", 1, benchBatches)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Marshal(cp); err != nil {
			b.Fatal(err)
		}
	}
}
