package offsets

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/tlsconfig"
)

// Defaults of RedisConfig.
const (
	DefaultKeyPrefix    = "ampbridge:"
	DefaultDialTimeout  = 5 * time.Second
	DefaultReadTimeout  = 3 * time.Second
	DefaultWriteTimeout = 3 * time.Second
	DefaultMaxRetries   = 3
)

// RedisConfig configures the Redis store; the yaml keys are the config
// file's. Secrets (Password, key files) come from the environment or files,
// and never reach logs: LogValue redacts the password.
type RedisConfig struct {
	// Addr is the server's host:port. Required.
	Addr string `yaml:"addr"`
	// Username is the ACL user; empty means the default user.
	Username string `yaml:"username"`
	// Password authenticates Username (or the default user, requirepass).
	Password string `yaml:"password"`
	// DB is the database number, default 0.
	DB int `yaml:"db"`
	// KeyPrefix starts every key, default DefaultKeyPrefix ("ampbridge:").
	// The stream id follows in braces, a Redis Cluster hash tag, so all keys
	// of one stream live in one slot: "ampbridge:{stream}:checkpoint".
	KeyPrefix string `yaml:"key_prefix"`
	// TLS enables TLS and sets its files.
	TLS RedisTLS `yaml:"tls"`
	// DialTimeout bounds connecting, default DefaultDialTimeout (5s).
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ReadTimeout bounds reading a reply, default DefaultReadTimeout (3s).
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing a command, default DefaultWriteTimeout (3s).
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxRetries is how often a command is retried on a network error,
	// default DefaultMaxRetries (3); -1 disables retries. A retried commit is
	// safe: the commit script recognises its own earlier write.
	MaxRetries int `yaml:"max_retries"`
}

// RedisTLS configures TLS to Redis: the bridge's one TLS setting, loaded
// by tlsconfig.Load.
type RedisTLS = tlsconfig.Config

// LogValue implements slog.LogValuer without the password.
func (c RedisConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("addr", c.Addr), slog.String("username", c.Username),
		slog.Bool("password_set", c.Password != ""), slog.Int("db", c.DB),
		slog.String("key_prefix", c.KeyPrefix), slog.Bool("tls", c.TLS.Enabled))
}

// DefaultRedisConfig returns the documented defaults; Addr must still be
// set. The bridge's checkpoint.redis keys take their defaults from it.
func DefaultRedisConfig() RedisConfig {
	return RedisConfig{KeyPrefix: DefaultKeyPrefix, DialTimeout: DefaultDialTimeout, ReadTimeout: DefaultReadTimeout,
		WriteTimeout: DefaultWriteTimeout, MaxRetries: DefaultMaxRetries}
}

// withDefaults fills unset fields.
func (c RedisConfig) withDefaults() RedisConfig {
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	return c
}

// Validate checks the configuration; each error names the field.
func (c RedisConfig) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Addr); c.Addr == "" || err != nil {
		errs = append(errs, fmt.Errorf("checkpoint.redis.addr %q: want host:port, e.g. 127.0.0.1:6379", c.Addr))
	}
	if c.DB < 0 {
		errs = append(errs, fmt.Errorf("checkpoint.redis.db %d: want 0 or more", c.DB))
	}
	if strings.ContainsAny(c.KeyPrefix, "{} \t\r\n") {
		errs = append(errs, fmt.Errorf("checkpoint.redis.key_prefix %q: must not contain braces or white space (the stream id is added as a {hash tag})", c.KeyPrefix))
	}
	for name, d := range map[string]time.Duration{"dial_timeout": c.DialTimeout, "read_timeout": c.ReadTimeout, "write_timeout": c.WriteTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("checkpoint.redis.%s %s: want 0 (default) or more", name, d))
		}
	}
	if c.MaxRetries < -1 {
		errs = append(errs, fmt.Errorf("checkpoint.redis.max_retries %d: want -1 (none), 0 (default) or more", c.MaxRetries))
	}
	if err := c.TLS.Validate("checkpoint.redis.tls"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// commitScript is the one atomic compare-and-set of a commit. KEYS[1] is the
// checkpoint hash; ARGV = expected stored version, new version, encoded
// checkpoint. It returns {1, stored} when applied (or when exactly this
// checkpoint is already stored, so a retried commit whose first reply was
// lost succeeds), {0, stored} when fenced. Versions are compared as
// decimal strings, never as Lua numbers.
const commitScript = `
local cur = redis.call('HGET', KEYS[1], 'version')
if not cur then cur = '0' end
if cur == ARGV[1] then
  redis.call('HSET', KEYS[1], 'version', ARGV[2], 'data', ARGV[3])
  return {1, cur}
end
if cur == ARGV[2] and redis.call('HGET', KEYS[1], 'data') == ARGV[3] then
  return {1, cur}
end
return {0, cur}
`

// partitionScript stores a backfill partition record unless the stored
// progress is higher. KEYS = records hash, progress hash; ARGV = field,
// progress, record. Returns {1, empty string} or {0, stored record}.
const partitionScript = `
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur and tonumber(cur) > tonumber(ARGV[2]) then
  return {0, redis.call('HGET', KEYS[1], ARGV[1]) or ''}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return {1, ''}
`

// RedisStore is the production Store: one hash per stream holding the
// encoded checkpoint and its version, written by one Lua compare-and-set per
// commit. It is safe for concurrent use. Every method returns as soon as its
// context ends, leaving a command in flight to finish on its own: a Commit
// canceled so may still land (see await).
type RedisStore struct {
	client    *redis.Client
	prefix    string
	commit    *redis.Script
	partition *redis.Script
	log       *slog.Logger
	addr      string
	cfg       RedisConfig // for classifyRedisError; holds the password, never logged
}

// String names the store for messages: "checkpoint store redis at
// host:port".
func (s *RedisStore) String() string { return "checkpoint store redis at " + s.addr }

// NewRedisStore connects to Redis, proves it with a PING, and checks the
// server's durability settings (see CheckDurability): a weaker setting than
// appendonly yes + appendfsync always is logged as a warning, and so is a
// server that does not let us check (CONFIG forbidden on managed Redis, or
// an ACL user without +config|get). Close the store when done.
//
// A wrong password, a missing ACL permission or a failed TLS handshake is a
// *RedisAccessError (ErrRedisAuth, ErrRedisPermission, ErrRedisTLS), here
// and from every other method; a refused or lost connection is not.
func NewRedisStore(ctx context.Context, cfg RedisConfig, log *slog.Logger) (*RedisStore, error) {
	if log == nil {
		return nil, errors.New("offsets: NewRedisStore needs a logger")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("offsets: validating redis config: %w", err)
	}
	tlsCfg, err := tlsconfig.Load("checkpoint.redis.tls", cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("offsets: %w", err)
	}
	client := redis.NewClient(&redis.Options{
		Addr:                     cfg.Addr,
		Username:                 cfg.Username,
		Password:                 cfg.Password,
		DB:                       cfg.DB,
		TLSConfig:                tlsCfg,
		DialTimeout:              cfg.DialTimeout,
		ReadTimeout:              cfg.ReadTimeout,
		WriteTimeout:             cfg.WriteTimeout,
		MaxRetries:               cfg.MaxRetries,
		ContextTimeoutEnabled:    true,
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	s := &RedisStore{
		client:    client,
		prefix:    cfg.KeyPrefix,
		commit:    redis.NewScript(commitScript),
		partition: redis.NewScript(partitionScript),
		log:       log.With(slog.String("component", "offsets"), slog.String("redis_addr", cfg.Addr)),
		addr:      cfg.Addr,
		cfg:       cfg,
	}
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		err = s.classify(err)
		if tlsCfg != nil {
			// In TLS 1.3 a server that refuses the client certificate says
			// so after the client's handshake is done, and the reset of the
			// client's first write can overtake the alert: a connection
			// that waits for the server's answer tells (tlsconfig.Refusal).
			if alert, joined := tlsconfig.ExplainDropped(ctx, cfg.Addr, tlsCfg, err); alert != nil {
				err = s.classify(joined)
			}
		}
		return nil, fmt.Errorf("offsets: connecting to redis at %s: %w", cfg.Addr, err)
	}
	s.warnDurability(ctx)
	return s, nil
}

// classify turns a refusal that a retry does not fix into a
// *RedisAccessError (see classifyRedisError).
func (s *RedisStore) classify(err error) error { return classifyRedisError(s.cfg, err) }

// await runs call, one command, and returns its result, or ctx's error as
// soon as ctx ends. go-redis bounds a command in flight by read_timeout and
// write_timeout (and ctx's deadline), but not by ctx's cancellation: a
// stream told to stop while Redis is slow to answer (an fsync of
// appendfsync always on a busy disk) would otherwise wait it out. A command
// left behind finishes or times out on its own and returns its connection to
// the pool; a commit left so has an unknown outcome, like one whose reply was
// lost, which the next start reconciles with the control topic.
func await[T any](ctx context.Context, call func() (T, error)) (T, error) {
	if ctx.Done() == nil {
		return call()
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := call()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// Close closes the connection pool.
func (s *RedisStore) Close() error { return s.client.Close() }

// Ping sends PING: nil when Redis answers within ctx.
func (s *RedisStore) Ping(ctx context.Context) error {
	if _, err := await(ctx, func() (string, error) { return s.client.Ping(ctx).Result() }); err != nil {
		return fmt.Errorf("redis at %s: %w", s.client.Options().Addr, s.classify(err))
	}
	return nil
}

// CheckpointKey returns the key of the stream's checkpoint hash, e.g.
// "ampbridge:{s}:checkpoint".
func (s *RedisStore) CheckpointKey(stream string) string {
	return s.prefix + "{" + stream + "}:checkpoint"
}

// PartitionsKey returns the key of the stream's backfill partition hash.
func (s *RedisStore) PartitionsKey(stream string) string {
	return s.prefix + "{" + stream + "}:backfill"
}

func (s *RedisStore) progressKey(stream string) string {
	return s.prefix + "{" + stream + "}:backfill:progress"
}

// Durability is the persistence configuration reported by the server.
type Durability struct {
	// AppendOnly is the value of appendonly ("yes" or "no").
	AppendOnly string
	// AppendFsync is the value of appendfsync ("always", "everysec", "no").
	AppendFsync string
}

// Safe reports whether every acknowledged write survives a crash of the
// server: appendonly yes and appendfsync always.
func (d Durability) Safe() bool { return d.AppendOnly == "yes" && d.AppendFsync == "always" }

// CheckDurability reads appendonly and appendfsync with CONFIG GET. It fails
// where CONFIG is forbidden or renamed (common on managed Redis), with
// ErrRedisPermission for an ACL user without +config|get.
func (s *RedisStore) CheckDurability(ctx context.Context) (Durability, error) {
	var d Durability
	for _, p := range []struct {
		name string
		dst  *string
	}{{"appendonly", &d.AppendOnly}, {"appendfsync", &d.AppendFsync}} {
		m, err := await(ctx, func() (map[string]string, error) { return s.client.ConfigGet(ctx, p.name).Result() })
		if err != nil {
			return Durability{}, fmt.Errorf("offsets: reading redis CONFIG %s: %w", p.name, s.classify(err))
		}
		v, ok := m[p.name]
		if !ok {
			return Durability{}, fmt.Errorf("offsets: reading redis CONFIG %s: the server did not report it", p.name)
		}
		*p.dst = strings.ToLower(v)
	}
	return d, nil
}

func (s *RedisStore) warnDurability(ctx context.Context) {
	d, err := s.CheckDurability(ctx)
	switch {
	case errors.Is(err, ErrRedisPermission):
		s.log.WarnContext(ctx, "could not check redis durability: the ACL user may not run CONFIG GET, as expected of a restricted user "+
			"(grant +config|get to have it checked); make sure the server runs with appendonly yes and appendfsync always, "+
			"or a crash of redis can lose the newest checkpoints (they are then repaired from Kafka's control topic on start)",
			slog.Any("error", err))
	case err != nil:
		s.log.WarnContext(ctx, "could not check redis durability; make sure the server runs with appendonly yes and appendfsync always, "+
			"or a crash of redis can lose the newest checkpoints (they are then repaired from Kafka's control topic on start)",
			slog.Any("error", err))
	case !d.Safe():
		s.log.WarnContext(ctx, "redis durability is weaker than appendonly yes + appendfsync always: a crash of redis can lose acknowledged checkpoints "+
			"(they are then repaired from Kafka's control topic on start, if it is intact); set appendonly yes and appendfsync always",
			slog.String("appendonly", d.AppendOnly), slog.String("appendfsync", d.AppendFsync))
	default:
		s.log.DebugContext(ctx, "redis durability checked", slog.String("appendonly", d.AppendOnly), slog.String("appendfsync", d.AppendFsync))
	}
}

// Load returns the stream's checkpoint, or ErrNotFound.
func (s *RedisStore) Load(ctx context.Context, stream string) (Checkpoint, error) {
	if err := ValidateStream(stream); err != nil {
		return Checkpoint{}, err
	}
	key := s.CheckpointKey(stream)
	vals, err := await(ctx, func() ([]any, error) { return s.client.HMGet(ctx, key, "version", "data").Result() })
	if err != nil {
		return Checkpoint{}, fmt.Errorf("offsets: loading checkpoint from redis key %s: %w", key, s.classify(err))
	}
	ver, _ := vals[0].(string)
	data, _ := vals[1].(string)
	if ver == "" && data == "" {
		return Checkpoint{}, fmt.Errorf("%w: redis key %s does not exist", ErrNotFound, key)
	}
	cp, err := Unmarshal([]byte(data))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("loading checkpoint from redis key %s: %w", key, err)
	}
	if strconv.FormatUint(cp.Version, 10) != ver || cp.Stream != stream {
		return Checkpoint{}, &ValidationError{What: "redis key " + key, Problems: []string{fmt.Sprintf(
			"the hash's version field is %q and its checkpoint is version %d of stream %q; the key was written by something other than this store",
			ver, cp.Version, cp.Stream)}}
	}
	return cp, nil
}

// Commit stores cp with one atomic compare-and-set: only if the stored
// version is cp.Version-1. A refusal is a *StaleError.
func (s *RedisStore) Commit(ctx context.Context, cp Checkpoint) error {
	b, err := Marshal(cp)
	if err != nil {
		return err
	}
	key := s.CheckpointKey(cp.Stream)
	expected := strconv.FormatUint(cp.Version-1, 10)
	res, err := await(ctx, func() ([]any, error) {
		return s.commit.Run(ctx, s.client, []string{key}, expected, strconv.FormatUint(cp.Version, 10), b).Slice()
	})
	if err != nil {
		return fmt.Errorf("offsets: committing checkpoint version %d of stream %q to redis key %s: %w", cp.Version, cp.Stream, key, s.classify(err))
	}
	ok, stored, err := scriptReply(res)
	if err != nil {
		return fmt.Errorf("offsets: committing checkpoint to redis key %s: %w", key, err)
	}
	if ok {
		return nil
	}
	storedVer, err := strconv.ParseUint(stored, 10, 64)
	if err != nil {
		return fmt.Errorf("offsets: committing checkpoint to redis key %s: stored version %q is not a number", key, stored)
	}
	return &StaleError{Stream: cp.Stream, Expected: cp.Version - 1, Stored: storedVer, Where: "redis key " + key}
}

func scriptReply(res []any) (bool, string, error) {
	if len(res) != 2 {
		return false, "", fmt.Errorf("unexpected script reply %v", res)
	}
	n, ok1 := res[0].(int64)
	str, ok2 := res[1].(string)
	if !ok1 || !ok2 {
		return false, "", fmt.Errorf("unexpected script reply %v", res)
	}
	return n == 1, str, nil
}

// SavePartition stores a backfill partition record atomically unless the
// stored progress is higher.
func (s *RedisStore) SavePartition(ctx context.Context, p Partition) error {
	b, err := marshalPartition(p)
	if err != nil {
		return err
	}
	key := s.PartitionsKey(p.Stream)
	res, err := await(ctx, func() ([]any, error) {
		return s.partition.Run(ctx, s.client, []string{key, s.progressKey(p.Stream)},
			p.Key(), strconv.FormatUint(p.progress(), 10), b).Slice()
	})
	if err != nil {
		return fmt.Errorf("offsets: saving backfill partition %s of stream %q to redis key %s: %w", p.Key(), p.Stream, key, s.classify(err))
	}
	ok, stored, err := scriptReply(res)
	if err != nil {
		return fmt.Errorf("offsets: saving backfill partition to redis key %s: %w", key, err)
	}
	if ok {
		return nil
	}
	sp, err := unmarshalPartition([]byte(stored))
	if err != nil {
		return fmt.Errorf("offsets: saving backfill partition %s: the stored record at redis key %s is unreadable: %w", p.Key(), key, err)
	}
	return regressedError(sp, p, "redis key "+key)
}

// Partitions returns the stream's backfill partition records ordered by
// From, then To.
func (s *RedisStore) Partitions(ctx context.Context, stream string) ([]Partition, error) {
	if err := ValidateStream(stream); err != nil {
		return nil, err
	}
	key := s.PartitionsKey(stream)
	m, err := await(ctx, func() (map[string]string, error) { return s.client.HGetAll(ctx, key).Result() })
	if err != nil {
		return nil, fmt.Errorf("offsets: loading backfill partitions from redis key %s: %w", key, s.classify(err))
	}
	out := make([]Partition, 0, len(m))
	for field, v := range m {
		p, err := unmarshalPartition([]byte(v))
		if err != nil {
			return nil, fmt.Errorf("loading backfill partition %s from redis key %s: %w", field, key, err)
		}
		out = append(out, p)
	}
	sortPartitions(out)
	return out, nil
}

func sortPartitions(ps []Partition) {
	slices.SortFunc(ps, func(a, b Partition) int {
		return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
}
