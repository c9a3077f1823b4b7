package kstreams

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
)

// serviceKStreams is the name BRIDGE_TEST_REQUIRE uses for the Kafka
// Streams application's tools (java, mvn): with "kstreams" or "all",
// missing tools fail the test.
const serviceKStreams = "kstreams"

const (
	table     = "eth_rpc.transactions"
	streamSQL = "SELECT * FROM " + table + " SETTINGS stream = true"
)

// ktable is what failure messages call the table the application
// materialises.
const ktable = "the KTable"

// TestMain removes the bridge binary the tests built.
func TestMain(m *testing.M) { bridgetest.Main(m) }

// TestIntegrationKafkaStreamsChangelog publishes a stream with reorgs
// through the real bridge and checks that the Kafka Streams application of
// the README materialises exactly Amp's rows from the topic.
func TestIntegrationKafkaStreamsChangelog(t *testing.T) {
	c := bridgetest.ChangelogTest{Service: serviceKStreams, What: "Kafka Streams", Jar: "kstreams-table.jar", SQL: streamSQL}.Start(t)
	s, sim, p := c.Stack, c.Sim, c.Proc

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// The simulator serves its first 12 blocks as one batch; a fork inside
	// it retracts the whole batch and Amp sends its unchanged blocks again in
	// a batch of another id, maybe on the other partition: the same tx_hash
	// is then retracted on one partition and inserted on another.
	s.RequireCaughtUp(ctx, t, p)
	require.NoError(t, sim.Reorg(2, 3))

	// Then reorgs while the bridge publishes, and one of committed blocks
	// only, with the rows Amp had before it: the stale expectation the
	// negative check uses.
	pub := s.PublishWithReorgs(ctx, t, p, table)
	upTo, v := pub.UpTo, pub.Verify
	ops := countOps(ctx, t, s)
	require.Equal(t, v.Retracted, ops["d"], "op=d records against the rows bridge verify saw retracted")
	require.Positive(t, ops["tombstone"], "no tombstones in the topic")
	t.Logf("published up to block %d in %s; bridge verify: %d records, %d rows retracted, %d rows expected; topic: %v",
		upTo, pub.Stopped.Sub(c.Started).Round(time.Millisecond), v.Records, v.Retracted, v.Expected, ops)

	b := <-c.Java
	require.NoError(t, b.Err)
	t.Logf("Kafka Streams application ready in %s: %s", b.Dur.Round(time.Millisecond), b.Dir)

	res := runApp(ctx, t, b.Dir, s, c.Name+"-app")
	require.Zero(t, res.Exit, "Kafka Streams application failed; stderr tail:\n%s", res.StderrTail)
	t.Logf("Kafka Streams: %d rows in the KTable from %d input offsets; application %.1fs (JVM %s)",
		res.Summary.Rows, res.Summary.InputEndOffsets, res.Summary.Seconds, res.Wall.Round(time.Millisecond))
	require.Len(t, res.Rows, res.Summary.Rows)

	// The table: Amp's rows, row for row, every column.
	want := s.AmpRows(ctx, t, table, upTo, nil)
	require.Len(t, want, v.Expected, "rows at Amp against bridge verify's count")
	got := bridgetest.CanonicalRows(t, res.Rows)
	bridgetest.RequireSameRows(t, ktable, want, got)
	t.Logf("the KTable equals Amp's %d rows (all %d columns); total %s",
		len(want), columnCount(t, want), time.Since(c.Started).Round(time.Millisecond))

	// Negative checks: the comparison sees a wrong expectation.
	t.Run("stale-expectation-detected", func(t *testing.T) {
		bridgetest.RequireStaleDetected(t, ktable, pub.Stale, got)
	})
	t.Run("changed-row-detected", func(t *testing.T) {
		bridgetest.RequireChangedRowDetected(t, want, got, "value")
	})
	// A reader schema (reader.avsc: some of the columns, no namespace, the
	// bridge's fixed types) resolves every record to itself.
	t.Run("reader-schema", func(t *testing.T) {
		r := runApp(ctx, t, b.Dir, s, c.Name+"-reader", "--reader-schema", filepath.Join(c.Root, "test", "kstreams", "reader.avsc"))
		require.Zero(t, r.Exit, "Kafka Streams application failed; stderr tail:\n%s", r.StderrTail)
		got := bridgetest.CanonicalRows(t, r.Rows)
		columns := []string{"block_num", "tx_index", "tx_hash", "timestamp", "from", "to", "value", "gas_price"}
		bridgetest.RequireSameRows(t, ktable, bridgetest.ProjectRows(t, want, columns), got)
		t.Logf("with reader.avsc: the KTable equals Amp's %d rows in %d columns", len(got), len(columns))
	})
	// Schema evolution: the query's schema gains gas_price (the simulator
	// hid it) and the bridge, restarted, goes on on the same topic under a
	// new version of the subject; a reorg retracts rows of both versions.
	// The KTable, read with reader.avsc, equals a fresh query at Amp with
	// gas_price null in the rows published before the change.
	t.Run("schema-evolution", func(t *testing.T) {
		s3, upTo, old := bridgetest.PublishAcrossSchemaChange(ctx, t, c, c.Name+"-evolve", "transactions.gas_price")
		r := runApp(ctx, t, b.Dir, s3, c.Name+"-evolve-app", "--reader-schema", filepath.Join(c.Root, "test", "kstreams", "reader.avsc"))
		require.Zero(t, r.Exit, "Kafka Streams application failed across the schema change; stderr tail:\n%s", r.StderrTail)
		columns := []string{"block_num", "tx_index", "tx_hash", "timestamp", "from", "to", "value", "gas_price"}
		amp := bridgetest.ProjectRows(t, s3.AmpRows(ctx, t, table, upTo, nil), columns)
		got := bridgetest.CanonicalRows(t, r.Rows)
		bridgetest.RequireSameRows(t, ktable, bridgetest.NullAt(t, amp, "gas_price", old), got)
		// The comparison sees gas_price: Amp's values in the old rows differ.
		missing, _ := bridgetest.DiffRows(amp, got)
		require.NotEmpty(t, missing, "old rows' gas_price should be null in the KTable, not Amp's value")
		t.Logf("schema evolution (%d blocks of the first schema): the KTable equals Amp's %d rows in %d columns", len(old), len(got), len(columns))
	})
	// Keyed by tx_hash, the table of a batch-keyed topic can lose rows: the
	// first batch's retraction and the insert of its unchanged rows in the
	// replacement batch race when the two batches are on two partitions.
	// Whether it happens depends on the partitions and on the order Kafka
	// Streams processes its tasks in, so this only reports it.
	t.Run("tx_hash-key-on-batch-keyed-topic", func(t *testing.T) {
		r := runApp(ctx, t, b.Dir, s, c.Name+"-txhash", "--key", "tx_hash")
		require.Zero(t, r.Exit, "Kafka Streams application failed; stderr tail:\n%s", r.StderrTail)
		missing, extra := bridgetest.DiffRows(want, bridgetest.CanonicalRows(t, r.Rows))
		t.Logf("keyed by tx_hash on batch keys: %d rows in the KTable, %d of Amp's rows missing, %d extra",
			len(r.Rows), len(missing), len(extra))
		// A reordered retraction can only delete a row, never add one.
		require.Empty(t, extra, "rows Amp does not have")
	})
	// With key: row and key_columns: [tx_hash] every event of a transaction
	// is on one partition, and the table keyed by tx_hash is right.
	t.Run("row-key-mode-by-tx_hash", func(t *testing.T) {
		s2, p2 := c.StartRun(t, c.Name+"-rowkey", "key: row", "key_columns: [tx_hash]")
		s2.RequireCaughtUp(ctx, t, p2)
		require.NoError(t, sim.Reorg(2, 3)) // a fork inside the first batch (all blocks)
		for i := range 6 {
			time.Sleep(100 * time.Millisecond)
			if i == 3 {
				require.NoError(t, sim.Reorg(1, 2))
				continue
			}
			sim.Mine(1)
		}
		upTo := s2.RequireCaughtUp(ctx, t, p2)
		require.Equal(t, 0, p2.Term(30*time.Second), "bridge exit code; log tail:\n%s", p2.Tail(30))
		ops := countOps(ctx, t, s2)
		require.Positive(t, ops["d"], "no retractions in the topic")
		r := runApp(ctx, t, b.Dir, s2, c.Name+"-rowkey-app", "--key", "tx_hash")
		require.Zero(t, r.Exit, "Kafka Streams application failed; stderr tail:\n%s", r.StderrTail)
		want := s2.AmpRows(ctx, t, table, upTo, nil)
		bridgetest.RequireSameRows(t, ktable, want, bridgetest.CanonicalRows(t, r.Rows))
		t.Logf("key: row: the KTable keyed by tx_hash equals Amp's %d rows (topic: %v)", len(want), ops)
	})
}

// countOps reads the data topic (read_committed) and counts its records by
// the amp-op header, and its tombstones.
func countOps(ctx context.Context, t testing.TB, s *bridgetest.Stack) map[string]int {
	t.Helper()
	n := map[string]int{}
	s.EachCommitted(ctx, t, func(r *kgo.Record) {
		if r.Value == nil {
			n["tombstone"]++
			return
		}
		for _, h := range r.Headers {
			if h.Key == "amp-op" {
				n[string(h.Value)]++
			}
		}
	})
	return n
}

// columnCount is the number of columns of the first row.
func columnCount(t testing.TB, rows []string) int {
	t.Helper()
	if len(rows) == 0 {
		return 0
	}
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(rows[0]), &m))
	return len(m)
}

// appSummary is the JSON the application prints on stderr after
// "kstreams-table summary: ".
type appSummary struct {
	Topic           string  `json:"topic"`
	ApplicationID   string  `json:"application_id"`
	InputEndOffsets int64   `json:"input_end_offsets"`
	Rows            int     `json:"rows"`
	Seconds         float64 `json:"seconds"`
}

// runApp runs the Kafka Streams application with application id appID over
// the stack's data topic (test/kstreams/src/main/java/local/kstreams), and
// adds appID to the stack's Apps; extra arguments are appended.
func runApp(ctx context.Context, t testing.TB, dir string, s *bridgetest.Stack, appID string, extra ...string) bridgetest.JavaRun[appSummary] {
	t.Helper()
	s.Apps = append(s.Apps, appID)
	args := []string{
		"--bootstrap", strings.Join(s.Brokers, ","), "--registry", s.Registry, "--topic", s.Topic,
		"--application-id", appID, "--state-dir", filepath.Join(t.TempDir(), "state"), "--timeout", "200",
	}
	return bridgetest.RunJava[appSummary](ctx, t, bridgetest.JavaProgram{
		Name:          "the Kafka Streams application",
		Dir:           dir,
		Log4j:         filepath.Join(bridgetest.ModuleRoot(t), "test", "kstreams", "src", "main", "resources", "log4j2.properties"),
		Heap:          "512m",
		Main:          "local.kstreams.TransactionsTable",
		Args:          append(args, extra...),
		SummaryPrefix: "kstreams-table summary: ",
	})
}
