package flink

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
)

// serviceFlink is the name BRIDGE_TEST_REQUIRE uses for the Flink job's
// tools (java, mvn): with "flink" or "all", missing tools fail the test.
const serviceFlink = "flink"

const (
	table     = "eth_rpc.transactions"
	streamSQL = "SELECT * FROM " + table + " SETTINGS stream = true"
)

// readmeDDLBefore is the Flink definition the README showed before this test
// existed: BYTES columns for the bridge's Avro fixed hashes and addresses.
// Flink derives an Avro reader schema with bytes from it, which cannot read
// a fixed; the test checks that it still fails that way.
const readmeDDLBefore = "CREATE TABLE transactions (\n" +
	"  tx_hash BYTES, block_num BIGINT, `from` BYTES, `to` BYTES, `value` STRING,\n" +
	"  PRIMARY KEY (tx_hash) NOT ENFORCED\n" +
	") WITH (\n" +
	"  'connector' = 'kafka', 'topic' = 'amp.mainnet_txs',\n" +
	"  'properties.bootstrap.servers' = 'kafka:9092', 'properties.isolation.level' = 'read_committed',\n" +
	"  'scan.startup.mode' = 'earliest-offset',\n" +
	"  'format' = 'debezium-avro-confluent', 'debezium-avro-confluent.url' = 'http://schema-registry:8081'\n" +
	");\n"

// fixedAsBytesError is how Flink fails to read a row with Avro fixed columns
// into BYTES columns: the writer's row record in the before/after union
// matches no branch of the reader's union (fixed cannot resolve to bytes).
var fixedAsBytesError = regexp.MustCompile(`AvroTypeException: Found [A-Za-z0-9_.]+\.Value, expecting union`)

// flagEvolution runs the schema-evolution subtest: one more Flink job, about
// a minute on a loaded machine, beyond make test's budget; the Kafka Streams
// test reads a topic across the same change in make test.
var flagEvolution = flag.Bool("flink.evolution", true, "also read a topic across a schema change (one more Flink job, about a minute; make test's integration pass runs it beside test/e2e, the longest package)")

// TestMain removes the bridge binary the tests built.
func TestMain(m *testing.M) { bridgetest.Main(m) }

// TestIntegrationFlinkChangelog publishes a stream with reorgs through the
// real bridge and checks that Flink SQL, with the README's table definition
// (transactions.sql), materialises exactly Amp's rows from the topic.
func TestIntegrationFlinkChangelog(t *testing.T) {
	c := bridgetest.ChangelogTest{Service: serviceFlink, What: "Flink", Jar: "flink-changelog.jar", SQL: streamSQL}.Start(t)
	s, sim := c.Stack, c.Sim

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	pub := s.PublishWithReorgs(ctx, t, c.Proc, table)
	upTo, v := pub.UpTo, pub.Verify
	t.Logf("published up to block %d in %s; bridge verify: %d records, %d rows retracted, %d rows expected",
		upTo, pub.Stopped.Sub(c.Started).Round(time.Millisecond), v.Records, v.Retracted, v.Expected)

	b := <-c.Java
	require.NoError(t, b.Err)
	t.Logf("Flink job ready in %s: %s", b.Dur.Round(time.Millisecond), b.Dir)

	ddl := filepath.Join(c.Root, "test", "flink", "transactions.sql")
	res := runFlink(ctx, t, b.Dir, ddl, s)
	require.Zero(t, res.Exit, "Flink job failed; stderr tail:\n%s", res.StderrTail)
	sum := res.Summary
	t.Logf("Flink: changelog +I %d, -U %d, +U %d, -D %d; %d dangling retractions; %d rows in the table; job %.1fs (JVM %s)",
		sum.Changes["+I"], sum.Changes["-U"], sum.Changes["+U"], sum.Changes["-D"],
		sum.Dangling, sum.Rows, sum.Seconds, res.Wall.Round(time.Millisecond))

	// The changelog: every row an insert, every op=d a delete of exactly a
	// row that is there; the topic's retractions all arrive as -D.
	require.Zero(t, sum.Dangling, "retractions (-D) that matched no row Flink had")
	require.Zero(t, sum.Changes["-U"]+sum.Changes["+U"], "the bridge writes no updates")
	require.Equal(t, v.Retracted, sum.Changes["-D"], "Flink's -D count against the rows bridge verify saw retracted")
	require.Equal(t, sum.Changes["+I"]-sum.Changes["-D"], sum.Rows)
	require.Len(t, res.Rows, sum.Rows)

	// The table: Amp's rows, row for row.
	want := s.AmpRows(ctx, t, table, upTo, sum.Columns)
	require.Len(t, want, v.Expected, "rows at Amp against bridge verify's count")
	got := bridgetest.CanonicalRows(t, res.Rows)
	missing, extra := bridgetest.DiffRows(want, got)
	require.Empty(t, missing, "rows Amp has that Flink's table lacks")
	require.Empty(t, extra, "rows Flink's table has that Amp does not")
	t.Logf("Flink's table equals Amp's %d rows (columns %s); total %s",
		len(want), strings.Join(sum.Columns, ", "), time.Since(c.Started).Round(time.Millisecond))

	// Negative checks: the comparison sees a wrong expectation.
	t.Run("stale-expectation-detected", func(t *testing.T) {
		// The rows Amp had before the last reorg, in the same columns.
		bridgetest.RequireStaleDetected(t, "Flink's table", bridgetest.ProjectRows(t, pub.Stale, sum.Columns), got)
	})
	t.Run("changed-row-detected", func(t *testing.T) {
		bridgetest.RequireChangedRowDetected(t, want, got, "value")
	})
	// With fixed_as: bytes the bridge writes hashes and addresses as Avro
	// bytes, and the short definition (transactions_bytes.sql), whose
	// reader schema Flink derives by itself, reads them.
	t.Run("fixed-as-bytes-short-ddl", func(t *testing.T) {
		s2, p2 := c.StartRun(t, c.Name+"-bytes", "fixed_as: bytes")
		s2.RequireCaughtUp(ctx, t, p2)
		require.NoError(t, sim.Reorg(2, 3)) // of committed blocks: retractions
		upTo := s2.RequireCaughtUp(ctx, t, p2)
		require.Equal(t, 0, p2.Term(30*time.Second), "bridge exit code; log tail:\n%s", p2.Tail(30))
		r := runFlink(ctx, t, b.Dir, filepath.Join(c.Root, "test", "flink", "transactions_bytes.sql"), s2)
		require.Zero(t, r.Exit, "Flink job failed; stderr tail:\n%s", r.StderrTail)
		want := s2.AmpRows(ctx, t, table, upTo, r.Summary.Columns)
		missing, extra := bridgetest.DiffRows(want, bridgetest.CanonicalRows(t, r.Rows))
		require.Empty(t, missing, "rows Amp has that Flink's table lacks")
		require.Empty(t, extra, "rows Flink's table has that Amp does not")
		require.Positive(t, r.Summary.Changes["-D"], "the reorg's retractions reached Flink")
		t.Logf("fixed_as bytes: Flink's table equals Amp's %d rows (changelog +I %d, -D %d)", len(want),
			r.Summary.Changes["+I"], r.Summary.Changes["-D"])
	})
	// Schema evolution: the query's schema gains gas_price (the simulator
	// hid it) and the bridge, restarted, goes on on the same topic under a
	// new version of the subject; a reorg retracts rows of both versions.
	// Flink's table, read with transactions.sql, equals a fresh query at
	// Amp with gas_price null in the rows published before the change.
	t.Run("schema-evolution", func(t *testing.T) {
		if !*flagEvolution {
			t.Skip("one more Flink job: skipped with -flink.evolution=false")
		}
		s3, upTo, old := bridgetest.PublishAcrossSchemaChange(ctx, t, c, c.Name+"-evolve", "transactions.gas_price")
		r := runFlink(ctx, t, b.Dir, ddl, s3)
		require.Zero(t, r.Exit, "Flink job failed across the schema change; stderr tail:\n%s", r.StderrTail)
		want := bridgetest.NullAt(t, s3.AmpRows(ctx, t, table, upTo, r.Summary.Columns), "gas_price", old)
		missing, extra := bridgetest.DiffRows(want, bridgetest.CanonicalRows(t, r.Rows))
		require.Empty(t, missing, "rows Amp has that Flink's table lacks")
		require.Empty(t, extra, "rows Flink's table has that Amp does not")
		require.Positive(t, r.Summary.Changes["-D"], "the reorg's retractions reached Flink")
		// The comparison sees gas_price: Amp's values in the old rows differ.
		missing, _ = bridgetest.DiffRows(s3.AmpRows(ctx, t, table, upTo, r.Summary.Columns), bridgetest.CanonicalRows(t, r.Rows))
		require.NotEmpty(t, missing, "old rows' gas_price should be null in Flink, not Amp's value")
		t.Logf("schema evolution (%d blocks of the first schema): Flink's table equals Amp's %d rows (changelog +I %d, -D %d)", len(old), len(want),
			r.Summary.Changes["+I"], r.Summary.Changes["-D"])
	})
	// The README's former definition fails in Flink: BYTES cannot read the
	// bridge's Avro fixed columns.
	t.Run("bytes-ddl-fails", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "bytes.sql")
		require.NoError(t, os.WriteFile(f, []byte(readmeDDLBefore), 0o644))
		r := runFlink(ctx, t, b.Dir, f, s)
		require.NotZero(t, r.Exit, "Flink read Avro fixed columns as BYTES: simplify transactions.sql")
		m := fixedAsBytesError.FindString(r.Stderr)
		require.NotEmpty(t, m, "Flink failed otherwise; stderr tail:\n%s", r.StderrTail)
		t.Logf("BYTES definition fails as expected (%s): %s", r.Wall.Round(time.Millisecond), m)
	})
}

// flinkSummary is the JSON the Flink job prints on stderr after
// "flink-changelog summary: ".
type flinkSummary struct {
	Table    string         `json:"table"`
	Query    string         `json:"query"`
	Columns  []string       `json:"columns"`
	Changes  map[string]int `json:"changes"`
	Dangling int            `json:"dangling"`
	Rows     int            `json:"rows"`
	Seconds  float64        `json:"seconds"`
}

// runFlink runs the Flink job with the table definition in ddl over the
// stack's data topic (test/flink/src/main/java/local/flinkcheck).
func runFlink(ctx context.Context, t testing.TB, dir, ddl string, s *bridgetest.Stack) bridgetest.JavaRun[flinkSummary] {
	t.Helper()
	return bridgetest.RunJava[flinkSummary](ctx, t, bridgetest.JavaProgram{
		Name:  "the Flink job",
		Dir:   dir,
		Log4j: filepath.Join(bridgetest.ModuleRoot(t), "test", "flink", "src", "main", "resources", "log4j2.properties"),
		Heap:  "1g",
		Main:  "local.flinkcheck.FlinkChangelog",
		Args: []string{"--ddl", ddl, "--bootstrap", strings.Join(s.Brokers, ","), "--registry", s.Registry, "--topic", s.Topic,
			"--timeout", "200"},
		SummaryPrefix: "flink-changelog summary: ",
	})
}
