package offsets

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

func TestRedisConfigValidate(t *testing.T) {
	tests := []struct {
		name        string
		cfg         RedisConfig
		errContains string
	}{
		{name: "minimal", cfg: RedisConfig{Addr: "127.0.0.1:6379"}},
		{name: "full", cfg: RedisConfig{Addr: "redis:6380", Username: "bridge", Password: "p", DB: 2, KeyPrefix: "prod:amp:",
			TLS: RedisTLS{Enabled: true, CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", ServerName: "redis"}}},
		{name: "no addr", cfg: RedisConfig{}, errContains: `checkpoint.redis.addr "": want host:port`},
		{name: "addr without port", cfg: RedisConfig{Addr: "localhost"}, errContains: `checkpoint.redis.addr "localhost": want host:port`},
		{name: "negative db", cfg: RedisConfig{Addr: "a:1", DB: -1}, errContains: "checkpoint.redis.db -1: want 0 or more"},
		{name: "prefix with brace", cfg: RedisConfig{Addr: "a:1", KeyPrefix: "x{"}, errContains: "must not contain braces"},
		{name: "negative timeout", cfg: RedisConfig{Addr: "a:1", ReadTimeout: -time.Second}, errContains: "checkpoint.redis.read_timeout -1s"},
		{name: "bad retries", cfg: RedisConfig{Addr: "a:1", MaxRetries: -2}, errContains: "checkpoint.redis.max_retries -2"},
		{name: "tls files without tls", cfg: RedisConfig{Addr: "a:1", TLS: RedisTLS{CAFile: "ca.pem"}}, errContains: "tls.enabled is false"},
		{name: "cert without key", cfg: RedisConfig{Addr: "a:1", TLS: RedisTLS{Enabled: true, CertFile: "c.pem"}}, errContains: "set together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.errContains == "" {
				require.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.errContains)
		})
	}
}

func TestNewRedisStoreErrors(t *testing.T) {
	ctx := t.Context()
	log := testLogger(t)
	_, err := NewRedisStore(ctx, RedisConfig{Addr: "nohost"}, log)
	assert.ErrorContains(t, err, "validating redis config")

	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, []byte("not pem"), 0o600))
	_, err = NewRedisStore(ctx, RedisConfig{Addr: "127.0.0.1:1", TLS: RedisTLS{Enabled: true, CAFile: ca}}, log)
	assert.ErrorContains(t, err, "no PEM certificate")

	_, err = NewRedisStore(ctx, RedisConfig{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1}, log)
	assert.ErrorContains(t, err, "connecting to redis at 127.0.0.1:1")

	_, err = NewRedisStore(ctx, RedisConfig{Addr: "127.0.0.1:1"}, nil)
	assert.ErrorContains(t, err, "needs a logger")
}

func TestRedisConfigLogValueHidesPassword(t *testing.T) {
	var buf logBuffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", slog.Any("redis", RedisConfig{Addr: "a:1", Password: "hunter2"}))
	assert.NotContains(t, buf.String(), "hunter2")
	assert.Contains(t, buf.String(), "redis.password_set=true")
}

func TestRedisKeysAndLayout(t *testing.T) {
	m := miniredis.RunT(t)
	s, err := NewRedisStore(t.Context(), RedisConfig{Addr: m.Addr()}, testLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	assert.Equal(t, "ampbridge:{erc20.transfers}:checkpoint", s.CheckpointKey("erc20.transfers"))
	assert.Equal(t, "ampbridge:{erc20.transfers}:backfill", s.PartitionsKey("erc20.transfers"))

	cp := testCheckpoint("erc20.transfers", 1, 2)
	require.NoError(t, s.Commit(t.Context(), cp))
	want, err := Marshal(cp)
	require.NoError(t, err)
	assert.Equal(t, "1", m.HGet("ampbridge:{erc20.transfers}:checkpoint", "version"))
	assert.Equal(t, string(want), m.HGet("ampbridge:{erc20.transfers}:checkpoint", "data"))

	// A hash whose version field disagrees with its data is reported.
	m.HSet("ampbridge:{erc20.transfers}:checkpoint", "version", "9")
	_, err = s.Load(t.Context(), "erc20.transfers")
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, `the hash's version field is "9" and its checkpoint is version 1`)
	// Garbage data is reported with the key.
	m.HSet("ampbridge:{erc20.transfers}:checkpoint", "data", "garbage")
	_, err = s.Load(t.Context(), "erc20.transfers")
	assert.ErrorContains(t, err, "loading checkpoint from redis key ampbridge:{erc20.transfers}:checkpoint")
}

// TestRedisDurabilityUncheckable: miniredis has no CONFIG, like a managed
// Redis that forbids it: the store opens and logs that it could not check.
func TestRedisDurabilityUncheckable(t *testing.T) {
	m := miniredis.RunT(t)
	var buf logBuffer
	s, err := NewRedisStore(t.Context(), RedisConfig{Addr: m.Addr()}, slog.New(slog.NewTextHandler(&buf, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	assert.Contains(t, buf.String(), "level=WARN msg=\"could not check redis durability")
	assert.Contains(t, buf.String(), "CONFIG appendonly")
}

// TestIntegrationRedisDurabilityCheck runs against a private redis-server:
// appendfsync always is fine; everysec and appendonly no are warned about.
func TestIntegrationRedisDurabilityCheck(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = admin.Close() })
	tests := []struct {
		name     string
		set      map[string]string
		wantWarn bool
		want     Durability
	}{
		{name: "always", set: map[string]string{"appendonly": "yes", "appendfsync": "always"}, want: Durability{"yes", "always"}},
		{name: "everysec", set: map[string]string{"appendfsync": "everysec"}, wantWarn: true, want: Durability{"yes", "everysec"}},
		{name: "no aof", set: map[string]string{"appendonly": "no", "appendfsync": "always"}, wantWarn: true, want: Durability{"no", "always"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.set {
				require.NoError(t, admin.ConfigSet(t.Context(), k, v).Err())
			}
			var buf logBuffer
			s, err := NewRedisStore(t.Context(), RedisConfig{Addr: srv.Addr()}, slog.New(slog.NewTextHandler(&buf, nil)))
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			d, err := s.CheckDurability(t.Context())
			require.NoError(t, err)
			assert.Equal(t, tt.want, d)
			assert.Equal(t, !tt.wantWarn, d.Safe())
			if tt.wantWarn {
				assert.Contains(t, buf.String(), "level=WARN msg=\"redis durability is weaker than appendonly yes + appendfsync always")
				assert.Contains(t, buf.String(), "appendfsync="+tt.want.AppendFsync)
			} else {
				assert.NotContains(t, buf.String(), "level=WARN")
			}
		})
	}
}

// TestIntegrationRedisKill9 commits, kills redis-server with SIGKILL after
// each acknowledged commit, restarts it, and checks that the last
// acknowledged checkpoint is there and the next commit still fences.
func TestIntegrationRedisKill9(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	ctx := t.Context()
	s, err := NewRedisStore(ctx, RedisConfig{Addr: srv.Addr(), DialTimeout: time.Second}, testLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	for round := uint64(1); round <= 3; round++ {
		base := (round - 1) * 5
		for v := base + 1; v <= base+5; v++ {
			require.NoError(t, s.Commit(ctx, testCheckpoint("crash", v, int(v%7)+1)))
		}
		srv.Kill9()
		srv.Restart()
		got, err := s.Load(ctx, "crash")
		require.NoError(t, err, "loading after kill -9 and restart")
		assert.Equal(t, testCheckpoint("crash", base+5, int((base+5)%7)+1), got, "round %d", round)
		err = s.Commit(ctx, testCheckpoint("crash", base+5, 1))
		assert.ErrorIs(t, err, ErrFenced, "a stale commit is still refused after the restart")
	}
}

// TestIntegrationRedisRestrictedACLUser: a user with only the commands the
// doc lists (no CONFIG, as on managed Redis) can commit and load; the store
// logs that it could not check durability instead of failing.
func TestIntegrationRedisRestrictedACLUser(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = admin.Close() })
	require.NoError(t, admin.Do(t.Context(), "ACL", "SETUSER", "bridge", "on", ">s3cret", "~ampbridge:*",
		"+ping", "+hget", "+hmget", "+hset", "+hgetall", "+eval", "+evalsha").Err())

	var buf logBuffer
	s, err := NewRedisStore(t.Context(), RedisConfig{Addr: srv.Addr(), Username: "bridge", Password: "s3cret"},
		slog.New(slog.NewTextHandler(&buf, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	assert.Contains(t, buf.String(), "level=WARN msg=\"could not check redis durability")
	assert.Contains(t, buf.String(), "NOPERM")

	require.NoError(t, s.Commit(t.Context(), testCheckpoint("acl", 1, 2)))
	require.NoError(t, s.Commit(t.Context(), testCheckpoint("acl", 2, 3)))
	assert.ErrorIs(t, s.Commit(t.Context(), testCheckpoint("acl", 2, 1)), ErrFenced)
	got, err := s.Load(t.Context(), "acl")
	require.NoError(t, err)
	assert.Equal(t, testCheckpoint("acl", 2, 3), got)
	require.NoError(t, s.SavePartition(t.Context(), Partition{Stream: "acl", From: 0, To: 10, UpdatedAt: time.Now()}))
	ps, err := s.Partitions(t.Context(), "acl")
	require.NoError(t, err)
	assert.Len(t, ps, 1)

	_, err = NewRedisStore(t.Context(), RedisConfig{Addr: srv.Addr(), Username: "bridge", Password: "wrong"}, testLogger(t))
	assert.ErrorContains(t, err, "check the redis username and password")
}

func TestRedisConfigYAML(t *testing.T) {
	var cfg RedisConfig
	require.NoError(t, yaml.Unmarshal([]byte("addr: redis:6379\nusername: bridge\nkey_prefix: \"prod:\"\ndial_timeout: 2s\nmax_retries: -1\n"+
		"tls:\n  enabled: true\n  ca_file: /etc/ca.pem\n  server_name: redis\n"), &cfg))
	assert.Equal(t, RedisConfig{Addr: "redis:6379", Username: "bridge", KeyPrefix: "prod:", DialTimeout: 2 * time.Second, MaxRetries: -1,
		TLS: RedisTLS{Enabled: true, CAFile: "/etc/ca.pem", ServerName: "redis"}}, cfg)
	require.NoError(t, cfg.Validate())
}

// TestIntegrationRedisKill9MidStream kills redis-server while a writer is
// committing as fast as it can: every commit acknowledged before the kill
// is there after the restart (at most one more, whose reply was lost), and
// the writer continues from what is stored.
func TestIntegrationRedisKill9MidStream(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	s, err := NewRedisStore(t.Context(), RedisConfig{Addr: srv.Addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, MaxRetries: -1}, testLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	var next uint64 = 1
	for round := range 3 {
		var acked uint64
		acks := make(chan uint64)
		stop := make(chan struct{})
		go func() {
			defer close(acks)
			for v := next; ; v++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := s.Commit(t.Context(), testCheckpoint("mid", v, 4)); err != nil {
					return // the server is gone
				}
				select {
				case acks <- v:
				case <-stop:
					return
				}
			}
		}()
		for v := range acks {
			acked = v
			if v >= next+20 {
				srv.Kill9()
				break
			}
		}
		close(stop)
		for range acks {
			// Drain until the writer has stopped.
		}
		srv.Restart()
		got, err := s.Load(t.Context(), "mid")
		require.NoError(t, err, "round %d", round)
		assert.GreaterOrEqual(t, got.Version, acked, "round %d: an acknowledged commit was lost", round)
		assert.LessOrEqual(t, got.Version, acked+1, "round %d", round)
		assert.Equal(t, testCheckpoint("mid", got.Version, 4), got)
		next = got.Version + 1
	}
}

// TestIntegrationRedisStalledServerHonoursCancel: with redis-server stopped
// (SIGSTOP: its connections stay open and nothing answers, as a server
// stalled on a slow disk), a load and a commit return ctx's error once ctx is
// canceled, not at read_timeout; after the server resumes, the commit left
// behind lands, and the compare-and-set orders the commits that follow.
func TestIntegrationRedisStalledServerHonoursCancel(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	ctx := t.Context()
	// A read_timeout far beyond the test's guard: only the cancel can end
	// the calls in time.
	s, err := NewRedisStore(ctx, RedisConfig{Addr: srv.Addr(), DialTimeout: time.Second, ReadTimeout: time.Hour,
		WriteTimeout: time.Hour}, testLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Commit(ctx, testCheckpoint("stall", 1, 2)))

	resume := srv.Pause()
	calls := map[string]func(context.Context) error{
		"load": func(ctx context.Context) error { _, err := s.Load(ctx, "stall"); return err },
		"commit": func(ctx context.Context) error {
			return s.Commit(ctx, testCheckpoint("stall", 2, 3))
		},
	}
	for name, call := range calls {
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- call(cctx) }()
		time.Sleep(200 * time.Millisecond) // the command is written and waits for its reply
		cancel()
		select {
		case err := <-errc:
			assert.ErrorIs(t, err, context.Canceled, name)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not return after its context was canceled (redis-server stalled, read_timeout 1h)", name)
		}
	}
	resume()
	// The commit left behind was written before the stop: the server runs
	// it once it resumes, and the compare-and-set orders what follows.
	require.Eventually(t, func() bool {
		got, err := s.Load(ctx, "stall")
		return err == nil && got.Version == 2
	}, 30*time.Second, 20*time.Millisecond, "the commit left behind lands once the server answers")
	assert.ErrorIs(t, s.Commit(ctx, testCheckpoint("stall", 2, 5)), ErrFenced, "a stale writer of version 2 is refused")
	require.NoError(t, s.Commit(ctx, testCheckpoint("stall", 3, 4)))
	got, err := s.Load(ctx, "stall")
	require.NoError(t, err)
	assert.Equal(t, testCheckpoint("stall", 3, 4), got)
}
