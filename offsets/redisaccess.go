package offsets

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Sentinels of a refusal by Redis, or by TLS to Redis, that retrying does
// not fix: the error is a *RedisAccessError matching one of them.
var (
	// ErrRedisAuth means Redis refused the username or password (WRONGPASS,
	// NOAUTH): the password is wrong, or the user does not exist or is off.
	ErrRedisAuth = errors.New("offsets: redis refused the username or password")
	// ErrRedisPermission means the Redis ACL user may not run a command the
	// store needs, or not on its keys (NOPERM).
	ErrRedisPermission = errors.New("offsets: the redis ACL user lacks a permission the store needs")
	// ErrRedisTLS means the TLS handshake with Redis failed: the server's
	// certificate is not trusted or not for the name dialled, or the server
	// refused the client certificate (or its absence).
	ErrRedisTLS = errors.New("offsets: TLS handshake with redis failed")
)

// RedisACLRules returns the ACL rules of the least-privileged Redis user
// for the store with key prefix prefix: its keys and the commands it runs.
// PING proves the connection; HMGET loads a checkpoint; HGETALL lists
// backfill partitions; EVALSHA runs the commit and partition scripts (EVAL
// when the server does not have them cached yet), which run HGET and HSET
// as the same user. CONFIG GET (+config|get) is optional: without it the
// durability check is skipped with a warning. A checkpoint.redis.db other
// than 0 needs +select as well. For example, with the default prefix:
//
//	~ampbridge:* resetchannels -@all +ping +hmget +hgetall +evalsha +eval +hget +hset
func RedisACLRules(prefix string) string {
	return "~" + prefix + "* resetchannels -@all +ping +hmget +hgetall +evalsha +eval +hget +hset"
}

// RedisAccessError is a refusal by Redis or by TLS to it that a retry does
// not fix: a wrong password, a missing ACL permission, an untrusted
// certificate. It matches its Kind (ErrRedisAuth, ErrRedisPermission or
// ErrRedisTLS) and unwraps to the error of the Redis client.
type RedisAccessError struct {
	// Kind is ErrRedisAuth, ErrRedisPermission or ErrRedisTLS.
	Kind error
	// Addr is the server's host:port.
	Addr string
	// User is the ACL user ("default" when checkpoint.redis.username is
	// empty).
	User string
	// Command is, for ErrRedisPermission, the command the user may not run
	// in Redis' spelling ("evalsha", "config|get"); empty when the user may
	// not access the key.
	Command string
	// Fix says what to change, naming the configuration keys.
	Fix string
	// Err is the Redis client's error.
	Err error
}

// Error says what Redis or TLS refused and how to fix it.
func (e *RedisAccessError) Error() string {
	return fmt.Sprintf("redis at %s, user %q: %v: %s", e.Addr, e.User, e.Err, e.Fix)
}

// Is reports whether target is the error's Kind.
func (e *RedisAccessError) Is(target error) bool { return target == e.Kind }

// Unwrap returns the Redis client's error.
func (e *RedisAccessError) Unwrap() error { return e.Err }

var nopermCommand = regexp.MustCompile(`no permissions to run the '([^']+)' command`)

// classifyRedisError returns a *RedisAccessError for a refusal that a retry
// does not fix, and err itself otherwise (a refused or lost connection, a
// timeout: those are transient).
func classifyRedisError(cfg RedisConfig, err error) error {
	if err == nil {
		return nil
	}
	user := cfg.Username
	if user == "" {
		user = "default"
	}
	e := &RedisAccessError{Addr: cfg.Addr, User: user, Err: err}
	msg := err.Error()
	var verr *tls.CertificateVerificationError
	var hostErr x509.HostnameError
	switch {
	case strings.Contains(msg, "WRONGPASS"):
		e.Kind = ErrRedisAuth
		e.Fix = fmt.Sprintf("the password is wrong, or user %q does not exist or is off: check the redis username and password "+
			"(checkpoint.redis.username, and the password in checkpoint.redis.password_file or BRIDGE_CHECKPOINT_REDIS_PASSWORD)", user)
	case strings.Contains(msg, "NOAUTH"):
		e.Kind = ErrRedisAuth
		e.Fix = "the server requires a password: check the redis username and password " +
			"(set checkpoint.redis.password_file or BRIDGE_CHECKPOINT_REDIS_PASSWORD, and checkpoint.redis.username for an ACL user)"
	case strings.Contains(msg, "NOPERM"):
		e.Kind = ErrRedisPermission
		if m := nopermCommand.FindStringSubmatch(msg); m != nil {
			e.Command = strings.ToLower(m[1])
			e.Fix = fmt.Sprintf("user %q may not run %s; grant it with `ACL SETUSER %s +%s` (the bridge's user needs: %s)",
				user, strings.ToUpper(strings.ReplaceAll(e.Command, "|", " ")), user, e.Command, RedisACLRules(cfg.KeyPrefix))
		} else {
			e.Fix = fmt.Sprintf("user %q may not access the store's keys, which start with %q (checkpoint.redis.key_prefix); grant them with `ACL SETUSER %s ~%s*` (the bridge's user needs: %s)",
				user, cfg.KeyPrefix, user, cfg.KeyPrefix, RedisACLRules(cfg.KeyPrefix))
		}
	case strings.Contains(msg, "The user executing the script can't"):
		// A command inside the commit or partition script was refused; the
		// reply does not say which.
		e.Kind = ErrRedisPermission
		e.Fix = fmt.Sprintf("user %q may not run a command of the store's Lua script (HGET, HSET) or not on its keys, which start with %q; "+
			"grant them with `ACL SETUSER %s ~%s* +hget +hset` (the bridge's user needs: %s)",
			user, cfg.KeyPrefix, user, cfg.KeyPrefix, RedisACLRules(cfg.KeyPrefix))
	case errors.As(err, &hostErr):
		e.Kind = ErrRedisTLS
		e.Fix = "the server's certificate is not for the name dialled: set checkpoint.redis.tls.server_name to a name the certificate holds, " +
			"or checkpoint.redis.addr to one"
	case errors.As(err, &verr):
		e.Kind = ErrRedisTLS
		if cfg.TLS.CAFile == "" {
			e.Fix = "the server's certificate is not signed by a CA of the system: set checkpoint.redis.tls.ca_file to the CA that signed it"
		} else {
			e.Fix = fmt.Sprintf("the server's certificate is not signed by the CA in checkpoint.redis.tls.ca_file %s: set it to the CA that signed the server's certificate",
				cfg.TLS.CAFile)
		}
	case cfg.TLS.Enabled && strings.Contains(msg, "remote error: tls:"):
		e.Kind = ErrRedisTLS
		if cfg.TLS.CertFile == "" {
			e.Fix = "the server refused the handshake; it requires a client certificate (tls-auth-clients yes): " +
				"set checkpoint.redis.tls.cert_file/key_file to a certificate signed by a CA the server trusts"
		} else {
			e.Fix = fmt.Sprintf("the server refused the client certificate in checkpoint.redis.tls.cert_file %s: "+
				"set checkpoint.redis.tls.cert_file/key_file to a valid certificate signed by a CA the server trusts (its tls-ca-cert-file)", cfg.TLS.CertFile)
		}
	default:
		return err
	}
	return e
}
