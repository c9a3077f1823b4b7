package flink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// serviceFlink is the name BRIDGE_TEST_REQUIRE uses for the Flink job's
// tools (java, mvn): with "flink" or "all", missing tools fail the test.
const serviceFlink = "flink"

const (
	streamID  = "flink"
	streamSQL = "SELECT * FROM eth_rpc.transactions SETTINGS stream = true"
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

// TestMain removes the bridge binary the tests built.
func TestMain(m *testing.M) { bridgetest.Main(m) }

// TestIntegrationFlinkChangelog publishes a stream with reorgs through the
// real bridge and checks that Flink SQL, with the README's table definition
// (transactions.sql), materialises exactly Amp's rows from the topic.
func TestIntegrationFlinkChangelog(t *testing.T) {
	seeds := testenv.RequireReal(t, testenv.ServiceKafka, testenv.EnvKafkaSeeds)
	registry := testenv.RequireReal(t, testenv.ServiceRegistry, testenv.EnvRegistryURL)
	requireTools(t, "java", "mvn")
	root := bridgetest.ModuleRoot(t)
	start := time.Now()

	// Build the Flink job (mvn; cached in .local/flink/) while the bridge
	// is built and publishes.
	type built struct {
		dir string
		err error
		dur time.Duration
	}
	flinkBuilt := make(chan built, 1)
	go func() {
		t0 := time.Now()
		dir, err := buildFlinkJob(root)
		flinkBuilt <- built{dir, err, time.Since(t0)}
	}()

	bin := bridgetest.Build(t, bridgetest.RaceEnabled)
	sim := bridgetest.StartSim(t, ampsim.NetworkConfig{InitialBlocks: 12, TxPerBlock: 4, LogsPerTx: -1})

	dir := t.TempDir()
	name := testenv.UniqueName(t, "flink")
	s := &stack{bridgetest.Stack{Sim: sim, Brokers: testenv.Seeds(seeds), Registry: registry, Dir: dir, Bin: bin, Stream: streamID}}
	s.writeConfig(t, name)
	t.Cleanup(func() { s.deleteTopics(t) })
	t.Cleanup(func() {
		// Keep the bridge's log of a failed run (the temporary directory goes).
		if t.Failed() {
			keep := filepath.Join(os.TempDir(), name+"-bridge.log")
			if b, err := os.ReadFile(filepath.Join(dir, "bridge.log")); err == nil && os.WriteFile(keep, b, 0o644) == nil {
				t.Logf("bridge log kept in %s", keep)
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	p := bridgetest.Start(t, bin, s.CfgPath, filepath.Join(dir, "bridge.log"))

	// Reorgs while the bridge publishes: some hit committed batches, some
	// the open transaction.
	for i := range 24 {
		time.Sleep(100 * time.Millisecond)
		if i%6 == 5 {
			d := 1 + i%3
			require.NoError(t, sim.Reorg(d, d+1))
			continue
		}
		sim.Mine(1)
	}
	_, err := s.waitCaughtUp(ctx, p)
	require.NoError(t, err)

	// Then a reorg of committed blocks only, with the rows Amp had before it:
	// the stale expectation the negative check uses.
	head, _ := sim.Head()
	stale := s.ampRows(ctx, t, head, nil)
	require.NoError(t, sim.Reorg(2, 3))
	upTo, err := s.waitCaughtUp(ctx, p)
	require.NoError(t, err)
	require.Equal(t, 0, p.Term(30*time.Second), "bridge exit code; log tail:\n%s", p.Tail(30))
	published := time.Now()

	v := s.verify(t)
	require.Equal(t, 0, v.exit, "bridge verify:\n%s", v.out)
	require.Equal(t, upTo, v.upTo, "bridge verify:\n%s", v.out)
	require.Positive(t, v.retracted, "the reorgs retracted nothing; bridge verify:\n%s", v.out)
	t.Logf("published up to block %d in %s; bridge verify: %d records, %d rows retracted, %d rows expected",
		upTo, published.Sub(start).Round(time.Millisecond), v.records, v.retracted, v.expected)

	b := <-flinkBuilt
	require.NoError(t, b.err)
	t.Logf("Flink job ready in %s: %s", b.dur.Round(time.Millisecond), b.dir)

	ddl := filepath.Join(root, "test", "flink", "transactions.sql")
	res := runFlink(ctx, t, b.dir, ddl, s)
	require.Zero(t, res.exit, "Flink job failed; stderr tail:\n%s", res.stderrTail)
	sum := res.summary
	t.Logf("Flink: changelog +I %d, -U %d, +U %d, -D %d; %d dangling retractions; %d rows in the table; job %.1fs (JVM %s)",
		sum.Changes["+I"], sum.Changes["-U"], sum.Changes["+U"], sum.Changes["-D"],
		sum.Dangling, sum.Rows, sum.Seconds, res.wall.Round(time.Millisecond))

	// The changelog: every row an insert, every op=d a delete of exactly a
	// row that is there; the topic's retractions all arrive as -D.
	require.Zero(t, sum.Dangling, "retractions (-D) that matched no row Flink had")
	require.Zero(t, sum.Changes["-U"]+sum.Changes["+U"], "the bridge writes no updates")
	require.Equal(t, v.retracted, sum.Changes["-D"], "Flink's -D count against the rows bridge verify saw retracted")
	require.Equal(t, sum.Changes["+I"]-sum.Changes["-D"], sum.Rows)
	require.Len(t, res.rows, sum.Rows)

	// The table: Amp's rows, row for row.
	want := s.ampRows(ctx, t, upTo, sum.Columns)
	require.Len(t, want, v.expected, "rows at Amp against bridge verify's count")
	got := canonicalFlinkRows(t, res.rows)
	missing, extra := diffRows(want, got)
	require.Empty(t, missing, "rows Amp has that Flink's table lacks")
	require.Empty(t, extra, "rows Flink's table has that Amp does not")
	t.Logf("Flink's table equals Amp's %d rows (columns %s); total %s",
		len(want), strings.Join(sum.Columns, ", "), time.Since(start).Round(time.Millisecond))

	// Negative checks: the comparison sees a wrong expectation.
	t.Run("stale-expectation-detected", func(t *testing.T) {
		// The rows Amp had before the last reorg, in the same columns.
		old := projectRows(t, stale, sum.Columns)
		missing, extra := diffRows(old, got)
		require.NotEmpty(t, missing, "the replaced blocks' rows must be missing from Flink's table")
		require.NotEmpty(t, extra, "the replacement blocks' rows must be extra against the stale rows")
		t.Logf("stale expectation: %d rows missing (retracted), %d extra (replacements)", len(missing), len(extra))
	})
	t.Run("changed-row-detected", func(t *testing.T) {
		bad := slices.Clone(want)
		var row map[string]any
		dec := json.NewDecoder(strings.NewReader(bad[0]))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&row))
		for k := range row { // one value changed
			row[k] = "changed"
			break
		}
		b, err := json.Marshal(row)
		require.NoError(t, err)
		bad[0] = string(b)
		bad = append(bad, bad[1]) // and a duplicate
		missing, extra := diffRows(bad, got)
		require.Len(t, missing, 2)
		require.Len(t, extra, 1)
	})
	// With fixed_as: bytes the bridge writes hashes and addresses as Avro
	// bytes, and the short definition (transactions_bytes.sql), whose
	// reader schema Flink derives by itself, reads them.
	t.Run("fixed-as-bytes-short-ddl", func(t *testing.T) {
		s2 := &stack{bridgetest.Stack{Sim: sim, Brokers: s.Brokers, Registry: registry, Dir: t.TempDir(), Bin: bin, Stream: streamID}}
		s2.writeConfig(t, name+"-bytes", "fixed_as: bytes")
		t.Cleanup(func() { s2.deleteTopics(t) })
		p2 := bridgetest.Start(t, bin, s2.CfgPath, filepath.Join(s2.Dir, "bridge.log"))
		_, err := s2.waitCaughtUp(ctx, p2)
		require.NoError(t, err)
		require.NoError(t, sim.Reorg(2, 3)) // of committed blocks: retractions
		upTo, err := s2.waitCaughtUp(ctx, p2)
		require.NoError(t, err)
		require.Equal(t, 0, p2.Term(30*time.Second), "bridge exit code; log tail:\n%s", p2.Tail(30))
		r := runFlink(ctx, t, b.dir, filepath.Join(root, "test", "flink", "transactions_bytes.sql"), s2)
		require.Zero(t, r.exit, "Flink job failed; stderr tail:\n%s", r.stderrTail)
		want := s2.ampRows(ctx, t, upTo, r.summary.Columns)
		missing, extra := diffRows(want, canonicalFlinkRows(t, r.rows))
		require.Empty(t, missing, "rows Amp has that Flink's table lacks")
		require.Empty(t, extra, "rows Flink's table has that Amp does not")
		require.Positive(t, r.summary.Changes["-D"], "the reorg's retractions reached Flink")
		t.Logf("fixed_as bytes: Flink's table equals Amp's %d rows (changelog +I %d, -D %d)", len(want),
			r.summary.Changes["+I"], r.summary.Changes["-D"])
	})
	// The README's former definition fails in Flink: BYTES cannot read the
	// bridge's Avro fixed columns.
	t.Run("bytes-ddl-fails", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "bytes.sql")
		require.NoError(t, os.WriteFile(f, []byte(readmeDDLBefore), 0o644))
		r := runFlink(ctx, t, b.dir, f, s)
		require.NotZero(t, r.exit, "Flink read Avro fixed columns as BYTES: simplify transactions.sql")
		m := fixedAsBytesError.FindString(r.stderr)
		require.NotEmpty(t, m, "Flink failed otherwise; stderr tail:\n%s", r.stderrTail)
		t.Logf("BYTES definition fails as expected (%s): %s", r.wall.Round(time.Millisecond), m)
	})
}

// requireTools skips (or fails, when BRIDGE_TEST_REQUIRE names flink) when a
// command is not on PATH.
func requireTools(t *testing.T, cmds ...string) {
	t.Helper()
	for _, c := range cmds {
		if _, err := exec.LookPath(c); err != nil {
			if testenv.Required(serviceFlink) {
				t.Fatalf("%s not found but %s=%q requires Flink: run `deploy/local/stack.sh start flink`",
					c, testenv.EnvRequire, os.Getenv(testenv.EnvRequire))
			}
			t.Skipf("%s not found: run `deploy/local/stack.sh start flink` (installs a JDK and Maven)", c)
		}
	}
}

// buildFlinkJob runs build.sh and returns the build directory (its lib/
// holds the job's classpath).
func buildFlinkJob(root string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "test", "flink", "build.sh"))
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("test/flink/build.sh: %w\n%s", err, stderr.String())
	}
	dir := strings.TrimSpace(stdout.String())
	if _, err := os.Stat(filepath.Join(dir, "lib", "flink-changelog.jar")); err != nil {
		return "", fmt.Errorf("test/flink/build.sh printed %q: %w", dir, err)
	}
	return dir, nil
}

// stack is what one run talks to.
type stack struct {
	bridgetest.Stack
}

// writeConfig writes the bridge's YAML; topics and the transactional id are
// named after name, so the shared broker can be used. The checkpoint is a
// file store: Redis is not what this test is about.
func (s *stack) writeConfig(t testing.TB, name string, streamExtra ...string) {
	t.Helper()
	s.WriteConfig(t, bridgetest.Config{
		Name: name,
		SQL:  streamSQL,
		Sections: fmt.Sprintf(`checkpoint:
  store: file
  dir: %s
http:
  addr: off`, filepath.Join(s.Dir, "checkpoint")),
		Stream: `transaction:
  max_rows: 40
  max_age: 100ms
` + strings.Join(streamExtra, "\n"),
	})
}

// deleteTopics removes the run's topics from the shared broker.
func (s *stack) deleteTopics(t testing.TB) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
	if err != nil {
		t.Logf("deleting topics: %v", err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, s.Topic, s.Control); err != nil {
		t.Logf("deleting topics %s, %s: %v", s.Topic, s.Control, err)
	}
}

// waitCaughtUp waits (2 minutes at most) until the newest committed
// watermark is the simulator's head (number and hash) and returns the head.
func (s *stack) waitCaughtUp(ctx context.Context, p *bridgetest.Proc) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return s.WaitCaughtUp(ctx, p, 200*time.Millisecond)
}

// verifyResult is what `bridge verify` printed.
type verifyResult struct {
	exit      int
	out       string
	upTo      uint64
	records   int
	retracted int
	expected  int
}

var (
	verifyHead   = regexp.MustCompile(`blocks up to (\d+)\): (\d+) records read, (\d+) rows retracted`)
	verifyCounts = regexp.MustCompile(`expected (\d+) rows: `)
)

// verify runs `bridge verify`: the bridge's own comparison of the topic with
// Amp, a cross-check of the topic the Flink job then reads.
func (s *stack) verify(t testing.TB) verifyResult {
	t.Helper()
	var r verifyResult
	r.exit, r.out = bridgetest.Verify(t, s.Bin, s.CfgPath, s.Stream)
	if m := verifyHead.FindStringSubmatch(r.out); m != nil {
		r.upTo, _ = strconv.ParseUint(m[1], 10, 64)
		r.records, _ = strconv.Atoi(m[2])
		r.retracted, _ = strconv.Atoi(m[3])
	}
	if m := verifyCounts.FindStringSubmatch(r.out); m != nil {
		r.expected, _ = strconv.Atoi(m[1])
	}
	return r
}

// ampRows queries the simulator for every transaction up to block upTo (a
// batch query, as bridge verify makes) and returns each row as canonical
// JSON of the given columns, rendered as the Flink job renders them. With
// columns nil it returns the rows as maps of every column, for projectRows.
func (s *stack) ampRows(ctx context.Context, t testing.TB, upTo uint64, columns []string) []string {
	t.Helper()
	cfg := source.DefaultConfig()
	cfg.Addr = s.Sim.Addr()
	cl, err := source.New(cfg, source.Deps{})
	require.NoError(t, err)
	defer cl.Close()
	q, err := cl.Query(ctx, fmt.Sprintf("SELECT * FROM eth_rpc.transactions WHERE _block_num <= %d", upTo))
	require.NoError(t, err)
	defer q.Close()
	var out []string
	for {
		e, err := q.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if e.Kind != source.KindBatch || e.Batch == nil || e.Batch.NumRows() == 0 {
			e.Release()
			continue
		}
		rec := e.Batch
		sc := rec.Schema()
		cols := columns
		if cols == nil {
			for _, f := range sc.Fields() {
				cols = append(cols, f.Name)
			}
		}
		for i := range int(rec.NumRows()) {
			row := make(map[string]any, len(cols))
			for _, c := range cols {
				idx := sc.FieldIndices(c)
				require.Len(t, idx, 1, "column %q of the Flink table is not a column of the transactions table", c)
				v, ok := arrowValue(rec.Column(idx[0]), i)
				if !ok {
					if columns != nil {
						t.Fatalf("column %q (%s) has no rendering: extend arrowValue", c, rec.Column(idx[0]).DataType())
					}
					continue
				}
				row[c] = v
			}
			b, err := json.Marshal(row)
			require.NoError(t, err)
			out = append(out, string(b))
		}
		e.Release()
	}
	slices.Sort(out)
	return out
}

// arrowValue renders one Arrow value as the Flink job renders the value
// Flink read: integers as numbers, binary as 0x-prefixed hex, decimals as
// plain strings, timestamps as their integer value (the table declares them
// BIGINT), null as null. ok is false for types it does not render (lists,
// structs).
func arrowValue(col arrow.Array, i int) (v any, ok bool) {
	if col.IsNull(i) {
		return nil, true
	}
	switch a := col.(type) {
	case *array.Uint64:
		return json.Number(strconv.FormatUint(a.Value(i), 10)), true
	case *array.Uint32:
		return json.Number(strconv.FormatUint(uint64(a.Value(i)), 10)), true
	case *array.Int64:
		return json.Number(strconv.FormatInt(a.Value(i), 10)), true
	case *array.Int32:
		return json.Number(strconv.FormatInt(int64(a.Value(i)), 10)), true
	case *array.Boolean:
		return a.Value(i), true
	case *array.String:
		return a.Value(i), true
	case *array.FixedSizeBinary:
		return "0x" + hex.EncodeToString(a.Value(i)), true
	case *array.Binary:
		return "0x" + hex.EncodeToString(a.Value(i)), true
	case *array.Decimal128:
		return a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale), true
	case *array.Timestamp:
		return json.Number(strconv.FormatInt(int64(a.Value(i)), 10)), true
	case *array.Dictionary:
		return arrowValue(a.Dictionary(), a.GetValueIndex(i))
	default:
		return nil, false
	}
}

// projectRows keeps the given columns of full rows (from ampRows with nil
// columns).
func projectRows(t testing.TB, rows []string, columns []string) []string {
	t.Helper()
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(r))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&m))
		p := make(map[string]any, len(columns))
		for _, c := range columns {
			p[c] = m[c]
		}
		b, err := json.Marshal(p)
		require.NoError(t, err)
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out
}

// canonicalFlinkRows re-encodes the Flink job's JSON lines with sorted keys
// and numbers kept as written, so they compare with ampRows.
func canonicalFlinkRows(t testing.TB, lines []string) []string {
	t.Helper()
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(l))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&m), "Flink output line %q", l)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out
}

// diffRows compares two multisets of rows: missing are in want and not in
// got, extra in got and not in want (each as many times as it differs).
func diffRows(want, got []string) (missing, extra []string) {
	count := map[string]int{}
	for _, r := range want {
		count[r]++
	}
	for _, r := range got {
		count[r]--
	}
	for r, n := range count {
		for ; n > 0; n-- {
			missing = append(missing, r)
		}
		for ; n < 0; n++ {
			extra = append(extra, r)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return missing, extra
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

// flinkResult is one run of the Flink job.
type flinkResult struct {
	exit       int
	rows       []string
	summary    flinkSummary
	stderr     string
	stderrTail string
	wall       time.Duration
}

var summaryLine = regexp.MustCompile(`(?m)^flink-changelog summary: (\{.*\})$`)

// runFlink runs the Flink job with the table definition in ddl over the
// stack's data topic (test/flink/src/main/java/local/flinkcheck).
func runFlink(ctx context.Context, t testing.TB, dir, ddl string, s *stack) flinkResult {
	t.Helper()
	root := bridgetest.ModuleRoot(t)
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java",
		"-Xmx1g", "-XX:+UseSerialGC",
		"-Dlog4j2.configurationFile="+filepath.Join(root, "test", "flink", "src", "main", "resources", "log4j2.properties"),
		"-Djava.io.tmpdir="+t.TempDir(),
		"-cp", filepath.Join(dir, "lib")+string(os.PathListSeparator)+filepath.Join(dir, "lib", "*"),
		"local.flinkcheck.FlinkChangelog",
		"--ddl", ddl, "--bootstrap", strings.Join(s.Brokers, ","), "--registry", s.Registry, "--topic", s.Topic,
		"--timeout", "200")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err, "running the Flink job")
	}
	r := flinkResult{exit: cmd.ProcessState.ExitCode(), stderr: stderr.String(), wall: time.Since(t0)}
	r.stderrTail = lastLines(r.stderr, 40)
	if r.exit != 0 {
		return r
	}
	m := summaryLine.FindStringSubmatch(r.stderr)
	require.NotNil(t, m, "no summary line from the Flink job; stderr tail:\n%s", r.stderrTail)
	require.NoError(t, json.Unmarshal([]byte(m[1]), &r.summary))
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			r.rows = append(r.rows, l)
		}
	}
	require.NoError(t, sc.Err())
	return r
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
