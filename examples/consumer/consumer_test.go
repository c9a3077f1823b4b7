package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/schemas"
)

// envelopeSchema is a small bridge envelope: a two-column row and the
// bridge's real source record.
func envelopeSchema() string {
	return `{"type": "record", "name": "Envelope", "namespace": "amp.example", "fields": [
  {"name": "before", "type": ["null", {"type": "record", "name": "Row", "fields": [
    {"name": "_block_num", "type": "long"},
    {"name": "tx_hash", "type": "string"},
    {"name": "gas", "type": ["null", "long"], "default": null}]}], "default": null},
  {"name": "after", "type": ["null", "Row"], "default": null},
  {"name": "source", "type": ` + schemas.Source() + `},
  {"name": "op", "type": "string"},
  {"name": "ts_ms", "type": "long"}]}`
}

// fixture writes hand-made bridge records.
type fixture struct {
	t     *testing.T
	codec *goavro.Codec
	id    int
	topic string
}

type txRow struct {
	block int64
	hash  string
	gas   any // nil or int64
}

func (f *fixture) value(op, batch string, index int64, r txRow) []byte {
	f.t.Helper()
	row := map[string]any{"_block_num": r.block, "tx_hash": r.hash, "gas": nil}
	if r.gas != nil {
		row["gas"] = goavro.Union("long", r.gas)
	}
	ev := map[string]any{
		"before": nil, "after": nil, "op": op, "ts_ms": int64(1),
		"source": map[string]any{
			"connector": "amp-kafka-bridge", "version": "test", "stream": "example", "network": "mainnet",
			"block_num": goavro.Union("long", r.block), "batch_id": batch, "range_start": r.block, "range_end": r.block,
			"range_hash": "0x01", "range_prev_hash": nil, "row": index, "snapshot": false, "cause": nil,
		},
	}
	if op == "d" {
		ev["before"] = goavro.Union("amp.example.Row", row)
		ev["source"].(map[string]any)["cause"] = goavro.Union("string", "reorg")
	} else {
		ev["after"] = goavro.Union("amp.example.Row", row)
	}
	var h sr.ConfluentHeader
	b, err := h.AppendEncode(nil, f.id, nil)
	require.NoError(f.t, err)
	b, err = f.codec.BinaryFromNative(b, ev)
	require.NoError(f.t, err)
	return b
}

func (f *fixture) record(op, batch string, index int64, r txRow) *kgo.Record {
	rec := &kgo.Record{Topic: f.topic, Key: []byte(batch), Headers: []kgo.RecordHeader{
		{Key: "amp-batch-id", Value: []byte(batch)}, {Key: "amp-op", Value: []byte(op)},
		{Key: "amp-network", Value: []byte("mainnet")}, {Key: "amp-range", Value: fmt.Appendf(nil, "%d-%d", r.block, r.block)},
		{Key: "amp-stream", Value: []byte("example")},
	}}
	if op != "tombstone" {
		rec.Value = f.value(op, batch, index, r)
	}
	return rec
}

// TestConsumerAppliesRetractionsAndTombstones runs the consumer against
// kfake with hand-made records: two committed batches, a retraction of one
// row, a tombstone of a whole batch, and an aborted transaction whose rows
// a read_committed consumer never sees.
func TestConsumerAppliesRetractionsAndTombstones(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	defer cluster.Close()
	reg := srfake.New()
	defer reg.Close()

	const topic = "amp.example.transactions"
	admin, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	require.NoError(t, err)
	defer admin.Close()
	_, err = kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, topic)
	require.NoError(t, err)

	rc, err := sr.NewClient(sr.URLs(reg.URL()))
	require.NoError(t, err)
	ss, err := rc.CreateSchema(ctx, topic+"-value", sr.Schema{Schema: envelopeSchema(), Type: sr.TypeAvro})
	require.NoError(t, err)
	codec, err := goavro.NewCodec(envelopeSchema())
	require.NoError(t, err)
	f := &fixture{t: t, codec: codec, id: ss.ID, topic: topic}

	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.TransactionalID("example-test"),
		kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	defer prod.Close()
	txn := func(commit bool, recs ...*kgo.Record) {
		t.Helper()
		require.NoError(t, prod.BeginTransaction())
		require.NoError(t, prod.ProduceSync(ctx, recs...).FirstErr())
		require.NoError(t, prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
	}
	a0 := txRow{block: 10, hash: "0xa0", gas: int64(21000)}
	a1 := txRow{block: 10, hash: "0xa1"}
	b0 := txRow{block: 11, hash: "0xb0", gas: int64(50000)}
	b1 := txRow{block: 11, hash: "0xb1", gas: int64(60000)}
	c0 := txRow{block: 12, hash: "0xc0"}
	// Batch A (block 10) and batch B (block 11) commit.
	txn(true, f.record("c", "batchA", 0, a0), f.record("c", "batchA", 1, a1))
	txn(true, f.record("c", "batchB", 0, b0), f.record("c", "batchB", 1, b1))
	// A transaction that aborts (the bridge crashed or a reorg hit it).
	txn(false, f.record("c", "batchC", 0, c0))
	// A reorg replaces block 10: A's rows are retracted and A is
	// tombstoned; the replacement batch A' follows in the same transaction.
	a0new := txRow{block: 10, hash: "0xa0new"}
	txn(true, f.record("d", "batchA", 0, a0), f.record("d", "batchA", 1, a1), f.record("tombstone", "batchA", 0, a0),
		f.record("c", "batchA2", 0, a0new))
	// A retraction of one row of B on its own, then a tombstone of B
	// without retractions (retraction mode "tombstone").
	txn(true, f.record("d", "batchB", 1, b1))
	table := NewTable(rc)
	var out bytes.Buffer
	require.NoError(t, consume(ctx, options{brokers: cluster.ListenAddrs(), topic: topic, idle: time.Second}, table, &out))

	rows := table.Rows()
	require.Len(t, rows, 2, "change log:\n%s", out.String())
	assert.Equal(t, Row{BatchID: "batchA2", Index: 0, Block: 10, Columns: map[string]any{"_block_num": float64(10), "tx_hash": "0xa0new", "gas": nil}}, rows[0])
	assert.Equal(t, Row{BatchID: "batchB", Index: 0, Block: 11, Columns: map[string]any{"_block_num": float64(11), "tx_hash": "0xb0", "gas": float64(50000)}}, rows[1])
	assert.Equal(t, Stats{Inserts: 5, Retractions: 3, Tombstones: 1, RowsTombstoned: 0}, table.Stats)
	assert.NotContains(t, out.String(), "batchC", "rows of an aborted transaction must stay invisible")

	txn(true, f.record("tombstone", "batchB", 0, b0))
	out.Reset()
	require.NoError(t, consume(ctx, options{brokers: cluster.ListenAddrs(), topic: topic, idle: time.Second}, NewTable(rc), &out))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Equal(t, "x batch batchB (blocks 11-11) removed", lines[len(lines)-1])
}

// TestRunPrintsTheTable runs the command end to end (flags, registry
// client, table output) on kfake.
func TestRunPrintsTheTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1), kfake.SeedTopics(1, "t"))
	require.NoError(t, err)
	defer cluster.Close()
	reg := srfake.New()
	defer reg.Close()
	rc, err := sr.NewClient(sr.URLs(reg.URL()))
	require.NoError(t, err)
	ss, err := rc.CreateSchema(ctx, "t-value", sr.Schema{Schema: envelopeSchema(), Type: sr.TypeAvro})
	require.NoError(t, err)
	codec, err := goavro.NewCodec(envelopeSchema())
	require.NoError(t, err)
	f := &fixture{t: t, codec: codec, id: ss.ID, topic: "t"}
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	require.NoError(t, err)
	defer prod.Close()
	require.NoError(t, prod.ProduceSync(ctx, f.record("c", "b1", 0, txRow{block: 5, hash: "0x05"}),
		f.record("c", "b1", 1, txRow{block: 5, hash: "0x06"}), f.record("d", "b1", 0, txRow{block: 5, hash: "0x05"})).FirstErr())

	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"-brokers", strings.Join(cluster.ListenAddrs(), ","), "-registry", reg.URL(), "-topic", "t", "-idle", "1s"}, &out))
	assert.Contains(t, out.String(), `{"BatchID":"b1","Index":1,"Block":5,"Columns":{"_block_num":5,"gas":null,"tx_hash":"0x06"}}`)
	assert.Contains(t, out.String(), "1 rows (2 inserts, 1 retractions, 0 tombstones removing 0 rows)")

	err = run(ctx, []string{"-brokers", "x"}, &out)
	require.ErrorContains(t, err, "-topic is required")
}
