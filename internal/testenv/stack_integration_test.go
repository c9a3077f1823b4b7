package testenv_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// TestIntegrationKafkaTransactions checks on kfake and the real broker that a
// read_committed consumer sees committed records only, and that a second
// producer with the same transactional id fences the first.
func TestIntegrationKafkaTransactions(t *testing.T) {
	for _, b := range testenv.KafkaBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			topic := testenv.NewTopic(t, b, "txn", 1, nil)
			txnID := testenv.UniqueName(t, "txid")

			p1 := newTxnProducer(t, b, topic, txnID)
			produceTxn(ctx, t, p1, "committed", 10, kgo.TryCommit)
			produceTxn(ctx, t, p1, "aborted", 5, kgo.TryAbort)

			// The second producer's InitProducerID bumps the epoch and fences p1.
			p2 := newTxnProducer(t, b, topic, txnID)
			produceTxn(ctx, t, p2, "sentinel", 1, kgo.TryCommit)

			require.NoError(t, p1.BeginTransaction())
			produceErr := p1.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie")}).FirstErr()
			commitErr := p1.EndTransaction(ctx, kgo.TryCommit)
			t.Logf("%s: fenced producer: produce error %v; commit error %v", b.Name, produceErr, commitErr)
			require.Error(t, produceErr, "the fenced producer's produce must fail")
			assert.True(t, isFencing(produceErr), "produce error %v is not a fencing error", produceErr)
			require.ErrorIs(t, commitErr, kerr.ProducerFenced, "the fenced producer's commit must fail")

			got := consumeCommitted(ctx, t, b, topic, "sentinel-0")
			want := make([]string, 0, 11)
			for i := range 10 {
				want = append(want, "committed-"+strconv.Itoa(i))
			}
			want = append(want, "sentinel-0")
			assert.Equal(t, want, got, "read_committed must see the 10 committed records and the sentinel only")
		})
	}
}

// TestIntegrationKafkaBrokerKill9 kills a private real broker with SIGKILL
// after a committed and an open transaction, restarts it on the same data,
// and checks a read_committed consumer sees the committed records only.
func TestIntegrationKafkaBrokerKill9(t *testing.T) {
	k := testenv.StartKafkaBroker(t)
	b := k.Backend()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	topic := testenv.NewTopic(t, b, "restart", 1, nil)
	p := newTxnProducer(t, b, topic, testenv.UniqueName(t, "txid"))
	produceTxn(ctx, t, p, "committed", 3, kgo.TryCommit)
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.ProduceSync(ctx, &kgo.Record{Value: []byte("open")}).FirstErr())
	p.Close()

	start := time.Now()
	k.Kill9()
	k.Restart()
	t.Logf("broker restarted after kill -9 in %s", time.Since(start).Round(time.Millisecond))

	// The open transaction is aborted when its producer id is re-initialised.
	p2 := newTxnProducer(t, b, topic, p.OptValue(kgo.TransactionalID).(string))
	produceTxn(ctx, t, p2, "sentinel", 1, kgo.TryCommit)
	t.Logf("open transaction resolved after %s", time.Since(start).Round(time.Millisecond))
	got := consumeCommitted(ctx, t, b, topic, "sentinel-0")
	assert.Equal(t, []string{"committed-0", "committed-1", "committed-2", "sentinel-0"}, got)
}

// TestIntegrationKafkaCompression round-trips compressible batches with
// every codec; on the real broker this loads the zstd and snappy native
// libraries (unpacked into the stack's own tmp dir, not /tmp).
func TestIntegrationKafkaCompression(t *testing.T) {
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{name: "zstd", codec: kgo.ZstdCompression()},
		{name: "snappy", codec: kgo.SnappyCompression()},
		{name: "lz4", codec: kgo.Lz4Compression()},
		{name: "gzip", codec: kgo.GzipCompression()},
	}
	for _, b := range testenv.KafkaBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for _, c := range codecs {
				topic := testenv.NewTopic(t, b, "codec-"+c.name, 1, nil)
				p, err := kgo.NewClient(
					kgo.SeedBrokers(testenv.Seeds(b.Addr)...),
					kgo.DefaultProduceTopic(topic),
					kgo.ProducerBatchCompression(c.codec),
				)
				require.NoError(t, err)
				value := []byte(strings.Repeat("compressible block payload ", 40))
				rs := make([]*kgo.Record, 100)
				for i := range rs {
					rs[i] = &kgo.Record{Value: value}
				}
				rs[len(rs)-1] = &kgo.Record{Value: []byte("last")}
				require.NoError(t, p.ProduceSync(ctx, rs...).FirstErr(), "producing %s batches", c.name)
				p.Close()
				got := consumeCommitted(ctx, t, b, topic, "last")
				assert.Len(t, got, len(rs), "%s: records read back", c.name)
			}
		})
	}
}

// isFencing reports whether err says the producer's epoch is stale: Kafka
// answers PRODUCER_FENCED (KIP-588) or INVALID_PRODUCER_EPOCH, depending on
// the request and transaction protocol version.
func isFencing(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

func newTxnProducer(t *testing.T, b testenv.Backend, topic, txnID string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(testenv.Seeds(b.Addr)...),
		kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(30*time.Second),
		kgo.RecordRetries(3),
	)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func produceTxn(ctx context.Context, t *testing.T, cl *kgo.Client, prefix string, n int, commit kgo.TransactionEndTry) {
	t.Helper()
	require.NoError(t, cl.BeginTransaction())
	for i := range n {
		r := &kgo.Record{Key: []byte(prefix), Value: []byte(prefix + "-" + strconv.Itoa(i))}
		require.NoError(t, cl.ProduceSync(ctx, r).FirstErr(), "producing %s-%d", prefix, i)
	}
	require.NoError(t, cl.EndTransaction(ctx, commit), "ending transaction %s", prefix)
}

// consumeCommitted reads the topic from the start with read_committed until
// it sees the record whose value is last.
func consumeCommitted(ctx context.Context, t *testing.T, b testenv.Backend, topic, last string) []string {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(testenv.Seeds(b.Addr)...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	require.NoError(t, err)
	defer cl.Close()
	var got []string
	for {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consumed so far: %v", got)
		fs.EachError(func(topic string, p int32, err error) {
			require.NoError(t, err, "fetching %s/%d", topic, p)
		})
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			got = append(got, string(r.Value))
			done = done || string(r.Value) == last
		})
		if done {
			return got
		}
	}
}

// casScript sets a checkpoint only when the caller read the current version:
// KEYS[1] checkpoint hash; ARGV[1] expected version ("0" when absent),
// ARGV[2] new version, ARGV[3] payload. Returns 1 when applied, 0 when stale.
const casScript = `
local cur = redis.call('HGET', KEYS[1], 'version')
if (cur or '0') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'payload', ARGV[3])
return 1`

var cas = redis.NewScript(casScript)

func setCheckpoint(ctx context.Context, t *testing.T, rdb *redis.Client, key string, expect, next int) bool {
	t.Helper()
	n, err := cas.Run(ctx, rdb, []string{key}, expect, next, fmt.Sprintf("block-%d", next*100)).Int()
	require.NoError(t, err)
	return n == 1
}

// TestIntegrationRedisCheckpointCAS checks on miniredis and the real
// redis-server that a compare-and-set of a checkpoint refuses a stale version.
func TestIntegrationRedisCheckpointCAS(t *testing.T) {
	for _, b := range testenv.RedisBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rdb := redis.NewClient(&redis.Options{Addr: b.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			key := testenv.UniqueName(t, "ckpt")
			t.Cleanup(func() { _ = rdb.Del(context.Background(), key).Err() })

			require.True(t, setCheckpoint(ctx, t, rdb, key, 0, 1), "first write on an empty key")
			require.True(t, setCheckpoint(ctx, t, rdb, key, 1, 2), "write with the current version")
			assert.False(t, setCheckpoint(ctx, t, rdb, key, 1, 3), "stale version 1 must be refused")
			assert.False(t, setCheckpoint(ctx, t, rdb, key, 0, 3), "absent-version write must be refused")

			got, err := rdb.HGetAll(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"version": "2", "payload": "block-200"}, got)
		})
	}
}

// TestIntegrationRedisKill9KeepsAcknowledgedWrites kills a private
// redis-server (appendfsync always) with SIGKILL and checks the last
// acknowledged checkpoint survives the restart. Only a real server persists.
func TestIntegrationRedisKill9KeepsAcknowledgedWrites(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })

	const writes = 50
	for v := range writes {
		require.True(t, setCheckpoint(ctx, t, rdb, "ckpt:kill9", v, v+1))
	}
	srv.Kill9()
	require.Error(t, rdb.Ping(ctx).Err(), "the server must be down after Kill9")
	srv.Restart()

	got, err := rdb.HGetAll(ctx, "ckpt:kill9").Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"version": strconv.Itoa(writes), "payload": fmt.Sprintf("block-%d", writes*100)}, got)
	assert.False(t, setCheckpoint(ctx, t, rdb, "ckpt:kill9", writes-1, writes+1), "stale version after restart")
	assert.True(t, setCheckpoint(ctx, t, rdb, "ckpt:kill9", writes, writes+1), "current version after restart")
}

const blockSchema = `{
  "type": "record", "name": "Block", "namespace": "bridge.test",
  "fields": [
    {"name": "number", "type": "long"},
    {"name": "hash", "type": {"type": "fixed", "name": "Hash32", "size": 32}},
    {"name": "miner", "type": ["null", "string"], "default": null}
  ]
}`

// TestIntegrationRegistryConfluentWire checks on srfake and the stack's
// registry that a schema registers, its id comes back, and Confluent wire
// bytes (magic 0, 4-byte id, Avro body) decode back with goavro using the
// schema fetched by id.
func TestIntegrationRegistryConfluentWire(t *testing.T) {
	for _, b := range testenv.RegistryBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cl, err := sr.NewClient(sr.URLs(b.Addr))
			require.NoError(t, err)
			subject := testenv.UniqueName(t, "blocks") + "-value"

			ss, err := cl.CreateSchema(ctx, subject, sr.Schema{Schema: blockSchema, Type: sr.TypeAvro})
			require.NoError(t, err)
			require.Positive(t, ss.ID)
			again, err := cl.CreateSchema(ctx, subject, sr.Schema{Schema: blockSchema, Type: sr.TypeAvro})
			require.NoError(t, err)
			assert.Equal(t, ss.ID, again.ID, "registering the same schema twice returns the same id")

			codec, err := goavro.NewCodec(blockSchema)
			require.NoError(t, err)
			var serde sr.Serde
			serde.Register(ss.ID, map[string]any{},
				sr.AppendEncodeFn(func(b []byte, v any) ([]byte, error) { return codec.BinaryFromNative(b, v) }))
			hash := make([]byte, 32)
			for i := range hash {
				hash[i] = byte(i)
			}
			in := map[string]any{"number": int64(19_000_001), "hash": hash, "miner": goavro.Union("string", "0xabc")}
			wire, err := serde.Encode(in)
			require.NoError(t, err)
			require.Greater(t, len(wire), 5)
			assert.Equal(t, byte(0), wire[0], "magic byte")
			assert.Equal(t, uint32(ss.ID), binary.BigEndian.Uint32(wire[1:5]), "schema id")

			// Decode as an independent consumer would: id from the header,
			// schema from the registry, body with goavro.
			fetched, err := cl.SchemaByID(ctx, int(binary.BigEndian.Uint32(wire[1:5])))
			require.NoError(t, err)
			readCodec, err := goavro.NewCodec(fetched.Schema)
			require.NoError(t, err)
			out, rest, err := readCodec.NativeFromBinary(wire[5:])
			require.NoError(t, err)
			assert.Empty(t, rest)
			assert.Equal(t, in["number"], out.(map[string]any)["number"])
			assert.Equal(t, hash, out.(map[string]any)["hash"])
			assert.Equal(t, map[string]any{"string": "0xabc"}, out.(map[string]any)["miner"])
		})
	}
}

// TestIntegrationRedisServerTLS starts a private redis-server with mutual
// TLS and an ACL user: a client with the CA and the client certificate
// reaches it, one without the client certificate or without TLS does not,
// the user line is in force, and a restart keeps all of it.
func TestIntegrationRedisServerTLS(t *testing.T) {
	srv := testenv.StartRedisServer(t, testenv.WithRedisTLS(true), testenv.WithRedisUser("bridge on >s3cret ~app:* +ping +get +set"))
	require.NotNil(t, srv.TLS())
	ctx := t.Context()
	for round := range 2 {
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), TLSConfig: srv.ClientTLS(), Protocol: 2, MaxRetries: -1})
		require.NoError(t, admin.Ping(ctx).Err(), "round %d", round)
		_ = admin.Close()

		user := redis.NewClient(&redis.Options{Addr: srv.Addr(), TLSConfig: srv.ClientTLS(), Username: "bridge", Password: "s3cret", Protocol: 2, MaxRetries: -1})
		require.NoError(t, user.Set(ctx, "app:k", "v", 0).Err())
		assert.ErrorContains(t, user.Set(ctx, "other:k", "v", 0).Err(), "NOPERM")
		assert.ErrorContains(t, user.Del(ctx, "app:k").Err(), "NOPERM")
		_ = user.Close()

		noCert := srv.ClientTLS()
		noCert.Certificates = nil
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), TLSConfig: noCert, Protocol: 2, MaxRetries: -1})
		assert.Error(t, c.Ping(ctx).Err(), "mutual TLS: no client certificate, no connection")
		_ = c.Close()
		plain := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2, MaxRetries: -1, ReadTimeout: 300 * time.Millisecond})
		assert.Error(t, plain.Ping(ctx).Err(), "TLS only: no plain-text port")
		_ = plain.Close()
		srv.Restart()
	}
}
