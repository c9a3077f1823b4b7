package offsets

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// TestRedisACLRulesDocumented pins the least-privileged rules: the README
// and the package doc carry this line; a change must change them too.
func TestRedisACLRulesDocumented(t *testing.T) {
	rules := RedisACLRules(DefaultKeyPrefix)
	assert.Equal(t, "~ampbridge:* resetchannels -@all +ping +hmget +hgetall +evalsha +eval +hget +hset", rules)
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	assert.Contains(t, string(readme), "\nuser bridge on >PASSWORD "+rules+"\n", "the README's redis.conf user line")
	assert.Contains(t, string(readme), "\nACL SETUSER bridge on >PASSWORD "+rules+"\n", "the README's ACL SETUSER command")
}

// TestClassifyRedisError covers the replies a private server is not easily
// made to send (NOAUTH), and that everything else passes through.
func TestClassifyRedisError(t *testing.T) {
	cfg := RedisConfig{Addr: "r:6379", KeyPrefix: DefaultKeyPrefix}
	err := classifyRedisError(cfg, errors.New("NOAUTH Authentication required."))
	require.ErrorIs(t, err, ErrRedisAuth)
	assert.ErrorContains(t, err, `user "default"`)
	assert.ErrorContains(t, err, "the server requires a password: check the redis username and password (set checkpoint.redis.password_file or BRIDGE_CHECKPOINT_REDIS_PASSWORD")

	plain := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	assert.Same(t, plain, classifyRedisError(cfg, plain))
	assert.NoError(t, classifyRedisError(cfg, nil))
}

// TestIntegrationRedisAccessErrors runs against a private redis-server with
// mutual TLS and ACL users: each refusal that a retry cannot fix is a
// *RedisAccessError of its kind, naming the config key or ACL rule that
// fixes it; a refused connection is none of them.
func TestIntegrationRedisAccessErrors(t *testing.T) {
	rules := RedisACLRules(DefaultKeyPrefix)
	without := func(cmds ...string) string {
		fields := strings.Fields(rules)
		for _, c := range cmds {
			fields = slices.DeleteFunc(fields, func(f string) bool { return f == "+"+c })
		}
		return strings.Join(fields, " ")
	}
	srv := testenv.StartRedisServer(t, testenv.WithRedisTLS(true),
		testenv.WithRedisUser(testACLUser+" on >"+testACLPassword+" "+rules),
		testenv.WithRedisUser("noevalsha on >pw "+without("evalsha", "eval")),
		testenv.WithRedisUser("noeval on >pw "+without("eval")),
		testenv.WithRedisUser("nohset on >pw "+without("hset")),
		testenv.WithRedisUser("config on >pw "+rules+" +config|get"))
	f := srv.TLS()
	other, err := testenv.WriteTestPKI(filepath.Join(t.TempDir(), "other"))
	require.NoError(t, err)
	good := RedisTLS{Enabled: true, CAFile: f.CAFile, CertFile: f.ClientCertFile, KeyFile: f.ClientKeyFile}
	cfgFor := func(user, password string) RedisConfig {
		return RedisConfig{Addr: srv.Addr(), Username: user, Password: password, TLS: good, MaxRetries: -1}
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), TLSConfig: srv.ClientTLS(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = admin.Close() })

	// requireAccess checks that err is a *RedisAccessError of kind and no
	// other, and returns it.
	requireAccess := func(t *testing.T, err error, kind error) (ae *RedisAccessError) {
		t.Helper()
		require.ErrorIs(t, err, kind)
		require.ErrorAs(t, err, &ae)
		for _, k := range []error{ErrRedisAuth, ErrRedisPermission, ErrRedisTLS} {
			if !errors.Is(kind, k) {
				assert.NotErrorIs(t, err, k)
			}
		}
		return ae
	}

	t.Run("wrong password", func(t *testing.T) {
		_, err := NewRedisStore(t.Context(), cfgFor(testACLUser, "not-the-password"), testLogger(t))
		ae := requireAccess(t, err, ErrRedisAuth)
		assert.Equal(t, testACLUser, ae.User)
		assert.ErrorContains(t, err, `user "bridge"`)
		assert.ErrorContains(t, err, "WRONGPASS")
		assert.ErrorContains(t, err, "checkpoint.redis.password_file or BRIDGE_CHECKPOINT_REDIS_PASSWORD")
		assert.NotContains(t, err.Error(), "not-the-password", "the password is never in the message")
	})
	t.Run("unknown user", func(t *testing.T) {
		_, err := NewRedisStore(t.Context(), cfgFor("nobody", testACLPassword), testLogger(t))
		_ = requireAccess(t, err, ErrRedisAuth)
		assert.ErrorContains(t, err, `user "nobody" does not exist or is off`)
	})
	t.Run("no evalsha", func(t *testing.T) {
		s := openRedisStoreConfig(t, cfgFor("noevalsha", "pw"))
		err := s.Commit(t.Context(), testCheckpoint("perm", 1, 2))
		ae := requireAccess(t, err, ErrRedisPermission)
		assert.Equal(t, "evalsha", ae.Command)
		assert.ErrorContains(t, err, `user "noevalsha" may not run EVALSHA; grant it with `+"`ACL SETUSER noevalsha +evalsha`")
		assert.ErrorContains(t, err, "the bridge's user needs: "+rules)
		err = s.SavePartition(t.Context(), Partition{Stream: "perm", From: 0, To: 10, UpdatedAt: time.Now()})
		_ = requireAccess(t, err, ErrRedisPermission)
	})
	t.Run("no eval", func(t *testing.T) {
		// EVALSHA alone is not enough: a server without the script cached
		// (after a restart or SCRIPT FLUSH) answers NOSCRIPT, and the store
		// sends it with EVAL.
		require.NoError(t, admin.ScriptFlush(t.Context()).Err())
		s := openRedisStoreConfig(t, cfgFor("noeval", "pw"))
		ae := requireAccess(t, s.Commit(t.Context(), testCheckpoint("perm", 1, 2)), ErrRedisPermission)
		assert.Equal(t, "eval", ae.Command)
		assert.ErrorContains(t, ae, "`ACL SETUSER noeval +eval`")
	})
	t.Run("no hset in the script", func(t *testing.T) {
		s := openRedisStoreConfig(t, cfgFor("nohset", "pw"))
		// Redis does not say which command of the script was refused.
		ae := requireAccess(t, s.Commit(t.Context(), testCheckpoint("perm", 1, 2)), ErrRedisPermission)
		assert.Empty(t, ae.Command)
		assert.ErrorContains(t, ae, "The user executing the script can't run this command")
		assert.ErrorContains(t, ae, "`ACL SETUSER nohset ~ampbridge:* +hget +hset`")
	})
	t.Run("keys outside the user's pattern", func(t *testing.T) {
		cfg := cfgFor(testACLUser, testACLPassword)
		cfg.KeyPrefix = "other:"
		s := openRedisStoreConfig(t, cfg)
		_, err := s.Load(t.Context(), "perm")
		ae := requireAccess(t, err, ErrRedisPermission)
		assert.Empty(t, ae.Command)
		assert.ErrorContains(t, err, "`ACL SETUSER bridge ~other:*`")
		assert.ErrorContains(t, err, "checkpoint.redis.key_prefix")
	})
	t.Run("no CONFIG GET is a warning", func(t *testing.T) {
		var buf logBuffer
		s, err := NewRedisStore(t.Context(), cfgFor(testACLUser, testACLPassword), slog.New(slog.NewTextHandler(&buf, nil)))
		require.NoError(t, err, "a user without CONFIG GET is what least privilege looks like: the store opens")
		t.Cleanup(func() { _ = s.Close() })
		assert.Contains(t, buf.String(), `level=WARN msg="could not check redis durability: the ACL user may not run CONFIG GET, as expected of a restricted user (grant +config|get`)
		_, err = s.CheckDurability(t.Context())
		ae := requireAccess(t, err, ErrRedisPermission)
		assert.Equal(t, "config|get", ae.Command)

		buf = logBuffer{}
		s2, err := NewRedisStore(t.Context(), cfgFor("config", "pw"), slog.New(slog.NewTextHandler(&buf, nil)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s2.Close() })
		assert.NotContains(t, buf.String(), "level=WARN", "with +config|get the durability is checked (and is safe)")
	})
	t.Run("untrusted server certificate", func(t *testing.T) {
		cfg := cfgFor(testACLUser, testACLPassword)
		cfg.TLS.CAFile = other.CAFile
		_, err := NewRedisStore(t.Context(), cfg, testLogger(t))
		_ = requireAccess(t, err, ErrRedisTLS)
		assert.ErrorContains(t, err, "certificate signed by unknown authority")
		assert.ErrorContains(t, err, "not signed by the CA in checkpoint.redis.tls.ca_file "+other.CAFile)
	})
	t.Run("system roots do not trust it", func(t *testing.T) {
		cfg := cfgFor(testACLUser, testACLPassword)
		cfg.TLS.CAFile = ""
		_, err := NewRedisStore(t.Context(), cfg, testLogger(t))
		_ = requireAccess(t, err, ErrRedisTLS)
		assert.ErrorContains(t, err, "set checkpoint.redis.tls.ca_file to the CA that signed it")
	})
	t.Run("server name not in the certificate", func(t *testing.T) {
		cfg := cfgFor(testACLUser, testACLPassword)
		cfg.TLS.ServerName = "redis.example"
		_, err := NewRedisStore(t.Context(), cfg, testLogger(t))
		_ = requireAccess(t, err, ErrRedisTLS)
		assert.ErrorContains(t, err, "set checkpoint.redis.tls.server_name")
	})
	t.Run("no client certificate", func(t *testing.T) {
		cfg := cfgFor(testACLUser, testACLPassword)
		cfg.TLS.CertFile, cfg.TLS.KeyFile = "", ""
		_, err := NewRedisStore(t.Context(), cfg, testLogger(t))
		_ = requireAccess(t, err, ErrRedisTLS)
		assert.ErrorContains(t, err, "certificate required")
		assert.ErrorContains(t, err, "it requires a client certificate (tls-auth-clients yes): set checkpoint.redis.tls.cert_file/key_file")
	})
	t.Run("untrusted client certificate", func(t *testing.T) {
		cfg := cfgFor(testACLUser, testACLPassword)
		cfg.TLS.CertFile, cfg.TLS.KeyFile = other.ClientCertFile, other.ClientKeyFile
		_, err := NewRedisStore(t.Context(), cfg, testLogger(t))
		_ = requireAccess(t, err, ErrRedisTLS)
		assert.ErrorContains(t, err, "refused the client certificate in checkpoint.redis.tls.cert_file "+other.ClientCertFile)
	})
	t.Run("refused connection is transient", func(t *testing.T) {
		l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		cfg := cfgFor(testACLUser, testACLPassword)
		cfg.Addr, cfg.DialTimeout = addr, 200*time.Millisecond
		_, err = NewRedisStore(t.Context(), cfg, testLogger(t))
		require.ErrorContains(t, err, "connection refused")
		var ae *RedisAccessError
		assert.NotErrorAs(t, err, &ae)
	})
	t.Run("the right credentials work", func(t *testing.T) {
		s := openRedisStoreConfig(t, cfgFor(testACLUser, testACLPassword))
		require.NoError(t, s.Commit(t.Context(), testCheckpoint("ok", 1, 2)))
		require.NoError(t, s.Ping(t.Context()))
	})
}
