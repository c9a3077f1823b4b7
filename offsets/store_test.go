package offsets

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// testStore is what every store implements.
type testStore interface {
	Store
	PartitionStore
}

type namedStore struct {
	name  string
	store testStore
	// another opens a second, independent handle on the same backend
	// (its own connections or file descriptors), as a second bridge
	// instance would.
	another func(t *testing.T) testStore
}

// logBuffer is a concurrency-safe log sink for assertions on log output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newRedisStore opens a store on addr with a key prefix of its own, so tests
// sharing a real server never see each other's keys.
func newRedisStore(t testing.TB, addr string, log *slog.Logger) *RedisStore {
	t.Helper()
	return openRedisStore(t, addr, testenv.UniqueName(t, "offsets")+":", log)
}

func openRedisStore(t testing.TB, addr, prefix string, log *slog.Logger) *RedisStore {
	t.Helper()
	s, err := NewRedisStore(t.Context(), RedisConfig{Addr: addr, KeyPrefix: prefix}, log)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Leave nothing behind on a shared server (t.Context is done by now).
		ctx := context.Background()
		keys, err := s.client.Keys(ctx, prefix+"*").Result()
		if err == nil && len(keys) > 0 {
			err = s.client.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Logf("removing test keys %s*: %v", prefix, err)
		}
		_ = s.Close()
	})
	return s
}

// allStores returns the embedded store, a Redis store on every Redis
// backend (miniredis, and the real redis-server when BRIDGE_TEST_REDIS_ADDR
// is set), and Redis stores over TLS to private redis-servers (see
// tlsRedisStores).
func allStores(t *testing.T) []namedStore {
	t.Helper()
	dir := t.TempDir()
	openFile := func(t *testing.T) testStore {
		fs, err := NewFileStore(dir, testLogger(t))
		require.NoError(t, err)
		return fs
	}
	out := []namedStore{{name: "file", store: openFile(t), another: openFile}}
	for _, b := range testenv.RedisBackends(t) {
		rs := newRedisStore(t, b.Addr, testLogger(t))
		out = append(out, namedStore{name: b.Name, store: rs, another: func(t *testing.T) testStore {
			return openRedisStore(t, b.Addr, rs.prefix, testLogger(t))
		}})
	}
	return append(out, tlsRedisStores(t)...)
}

// testACLUser is the ACL user of the mutual-TLS server: the documented
// least privilege (RedisACLRules) for the default key prefix, nothing more.
const testACLUser, testACLPassword = "bridge", "s3cret-bridge"

// tlsRedisStores starts two private redis-servers and returns a store on
// each: "redis-tls" (TLS, the server asks for no client certificate, the
// default user) and "redis-mtls-acl" (mutual TLS: a client certificate is
// required, and the store logs in as the ACL user testACLUser with only
// RedisACLRules). Without a redis-server binary the test fails if
// BRIDGE_TEST_REQUIRE names redis and the two are skipped otherwise.
func tlsRedisStores(t *testing.T) []namedStore {
	t.Helper()
	if _, err := testenv.RedisServerBin(); err != nil {
		if testenv.Required(testenv.ServiceRedis) {
			t.Fatal(err)
		}
		for _, name := range []string{"redis-tls", "redis-mtls-acl"} {
			t.Run(name, func(t *testing.T) { t.Skip(err) })
		}
		return nil
	}
	tlsSrv := testenv.StartRedisServer(t, testenv.WithRedisTLS(false))
	tlsCfg := RedisConfig{Addr: tlsSrv.Addr(), TLS: RedisTLS{Enabled: true, CAFile: tlsSrv.TLS().CAFile}}
	mtlsSrv := testenv.StartRedisServer(t, testenv.WithRedisTLS(true),
		testenv.WithRedisUser(testACLUser+" on >"+testACLPassword+" "+RedisACLRules(DefaultKeyPrefix)))
	f := mtlsSrv.TLS()
	mtlsCfg := RedisConfig{Addr: mtlsSrv.Addr(), Username: testACLUser, Password: testACLPassword,
		TLS: RedisTLS{Enabled: true, CAFile: f.CAFile, CertFile: f.ClientCertFile, KeyFile: f.ClientKeyFile, ServerName: "localhost"}}
	var out []namedStore
	for _, c := range []struct {
		name string
		cfg  RedisConfig
	}{{"redis-tls", tlsCfg}, {"redis-mtls-acl", mtlsCfg}} {
		open := func(t *testing.T) testStore { return openRedisStoreConfig(t, c.cfg) }
		out = append(out, namedStore{name: c.name, store: open(t), another: open})
	}
	return out
}

// openRedisStoreConfig opens a store on a private server (nothing to clean
// up but the connections).
func openRedisStoreConfig(t testing.TB, cfg RedisConfig) *RedisStore {
	t.Helper()
	s, err := NewRedisStore(t.Context(), cfg, testLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestIntegrationStoreRoundTrip(t *testing.T) {
	for _, ns := range allStores(t) {
		t.Run(ns.name, func(t *testing.T) {
			ctx, s := t.Context(), ns.store
			_, err := s.Load(ctx, "rt")
			require.ErrorIs(t, err, ErrNotFound)

			for v := uint64(1); v <= 3; v++ {
				cp := testCheckpoint("rt", v, int(v)*2)
				require.NoError(t, s.Commit(ctx, cp))
				got, err := s.Load(ctx, "rt")
				require.NoError(t, err)
				assert.Equal(t, cp, got)
				assert.Equal(t, cp.Snapshot.Cursor(), got.Cursor())
			}
			// A retried commit of exactly the stored checkpoint succeeds.
			require.NoError(t, s.Commit(ctx, testCheckpoint("rt", 3, 6)))
			// Other streams are independent.
			_, err = s.Load(ctx, "rt2")
			require.ErrorIs(t, err, ErrNotFound)
			require.NoError(t, s.Commit(ctx, testCheckpoint("rt2", 1, 1)))
			got, err := s.Load(ctx, "rt")
			require.NoError(t, err)
			assert.Equal(t, uint64(3), got.Version)
		})
	}
}

func TestIntegrationStoreRejectsBadInput(t *testing.T) {
	for _, ns := range allStores(t) {
		t.Run(ns.name, func(t *testing.T) {
			ctx, s := t.Context(), ns.store
			_, err := s.Load(ctx, "Not/A/Stream")
			assert.ErrorContains(t, err, `stream id "Not/A/Stream" is not valid`)
			bad := testCheckpoint("bad", 1, 2)
			bad.Batches[0].ID = "x"
			assert.ErrorIs(t, s.Commit(ctx, bad), ErrInvalid)
			_, err = s.Load(ctx, "bad")
			assert.ErrorIs(t, err, ErrNotFound, "an invalid checkpoint is never stored")
		})
	}
}

func TestIntegrationStoreStaleWriter(t *testing.T) {
	tests := []struct {
		name        string
		stored      uint64 // versions committed first
		commit      uint64
		wantStored  uint64
		errContains string
	}{
		{name: "zombie behind", stored: 3, commit: 2, wantStored: 3, errContains: "Another instance of stream \"stale\" is running, or this one was superseded"},
		{name: "same version other content", stored: 3, commit: 3, wantStored: 3, errContains: "expected stored version 2 but the store holds version 3"},
		{name: "store lost writes", stored: 3, commit: 5, wantStored: 3, errContains: "the store holds the older version 3. The store lost acknowledged writes"},
		{name: "store empty", stored: 0, commit: 2, wantStored: 0, errContains: "the store holds no checkpoint"},
		{name: "first commit must be version 1", stored: 0, commit: 7, wantStored: 0, errContains: "expected stored version 6"},
	}
	for _, ns := range allStores(t) {
		t.Run(ns.name, func(t *testing.T) {
			for i, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					ctx, s := t.Context(), ns.store
					stream := fmt.Sprintf("stale%d", i)
					for v := uint64(1); v <= tt.stored; v++ {
						require.NoError(t, s.Commit(ctx, testCheckpoint(stream, v, 3)))
					}
					cp := testCheckpoint(stream, tt.commit, 4)
					err := s.Commit(ctx, cp)
					require.ErrorIs(t, err, ErrFenced)
					var se *StaleError
					require.ErrorAs(t, err, &se)
					assert.Equal(t, tt.commit-1, se.Expected) //nolint:testifylint // expected-actual: se.Expected is the actual value (StaleError's field name), tt.commit-1 the expected one
					assert.Equal(t, tt.wantStored, se.Stored)
					assert.Equal(t, stream, se.Stream)
					assert.ErrorContains(t, err, withStream(tt.errContains, stream))
					got, lerr := s.Load(ctx, stream)
					if tt.wantStored == 0 {
						assert.ErrorIs(t, lerr, ErrNotFound)
						return
					}
					require.NoError(t, lerr)
					assert.Equal(t, testCheckpoint(stream, tt.wantStored, 3), got, "a refused commit leaves the store unchanged")
				})
			}
		})
	}
}

// withStream replaces the literal stream name "stale" in a message template.
func withStream(msg, stream string) string {
	return string(bytes.ReplaceAll([]byte(msg), []byte(`"stale"`), []byte(`"`+stream+`"`)))
}

// raceCommits runs one goroutine per store (writer w uses stores[w]) that
// each try to commit versions 1..versions of stream in order, every writer
// with its own content, and returns, per version, the writers whose commit
// succeeded.
func raceCommits(t *testing.T, stores []Store, stream string, versions int) map[uint64][]int {
	t.Helper()
	var mu sync.Mutex
	won := make(map[uint64][]int)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w, s := range stores {
		wg.Go(func() {
			<-start
			for v := uint64(1); v <= uint64(versions); v++ {
				cp := testCheckpoint(stream, v, 4)
				cp.CommittedAt = cp.CommittedAt.Add(time.Duration(w))
				err := s.Commit(t.Context(), cp)
				if err == nil {
					mu.Lock()
					won[v] = append(won[v], w)
					mu.Unlock()
					continue
				}
				if !assert.ErrorIs(t, err, ErrFenced, "writer %d version %d", w, v) {
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return won
}

func TestIntegrationStoreRacingWriters(t *testing.T) {
	const writers, versions = 6, 25
	for _, ns := range allStores(t) {
		t.Run(ns.name, func(t *testing.T) {
			stores := []Store{ns.store}
			for len(stores) < writers {
				stores = append(stores, ns.another(t))
			}
			won := raceCommits(t, stores, "race", versions)
			for v := uint64(1); v <= versions; v++ {
				assert.Len(t, won[v], 1, "version %d must have exactly one winner, got %v", v, won[v])
			}
			got, err := ns.store.Load(t.Context(), "race")
			require.NoError(t, err)
			assert.Equal(t, uint64(versions), got.Version)
			if w := won[versions]; len(w) == 1 {
				want := testCheckpoint("race", versions, 4)
				assert.Equal(t, want.CommittedAt.Add(time.Duration(w[0])), got.CommittedAt, "the stored checkpoint is the winner's")
			}
		})
	}
}

func TestIntegrationStorePartitions(t *testing.T) {
	at := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	pt := func(n uint64, h reorg.Hash) *reorg.Point { return &reorg.Point{Number: n, Hash: h} }
	for _, ns := range allStores(t) {
		t.Run(ns.name, func(t *testing.T) {
			ctx, s := t.Context(), ns.store
			got, err := s.Partitions(ctx, "bf")
			require.NoError(t, err)
			assert.Empty(t, got)

			p2 := Partition{Stream: "bf", From: 100, To: 200, UpdatedAt: at}
			p1 := Partition{Stream: "bf", From: 0, To: 100, Last: pt(49, hashOf("mainnet", 49)), UpdatedAt: at}
			require.NoError(t, s.SavePartition(ctx, p2))
			require.NoError(t, s.SavePartition(ctx, p1))
			p1.Last, p1.Done = pt(99, hashOf("mainnet", 99)), true
			require.NoError(t, s.SavePartition(ctx, p1))
			require.NoError(t, s.SavePartition(ctx, p1), "saving the same progress again is allowed")
			require.NoError(t, s.SavePartition(ctx, Partition{Stream: "other", From: 0, To: 5, UpdatedAt: at}))

			got, err = s.Partitions(ctx, "bf")
			require.NoError(t, err)
			assert.Equal(t, []Partition{p1, p2}, got)

			stale := Partition{Stream: "bf", From: 0, To: 100, Last: pt(60, hashOf("mainnet", 60)), UpdatedAt: at}
			err = s.SavePartition(ctx, stale)
			require.ErrorIs(t, err, ErrPartitionRegressed)
			assert.ErrorContains(t, err, "partition 0-100 of stream \"bf\"")
			assert.ErrorContains(t, err, "is stored with progress done, the new record has up to block 60")

			err = s.SavePartition(ctx, Partition{Stream: "bf", From: 5, To: 5, UpdatedAt: at})
			assert.ErrorIs(t, err, ErrInvalid)
			got, err = s.Partitions(ctx, "bf")
			require.NoError(t, err)
			assert.Equal(t, []Partition{p1, p2}, got, "refused records leave the store unchanged")
		})
	}
}
