package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

var (
	flagTrials = flag.Int("e2e.trials", 20, "SIGKILL trials of the fault-injection harness")
	flagSeed   = flag.Uint64("e2e.seed", 0, "random seed of the fault schedule (0: from the clock; the seed is logged)")
	flagBridge = flag.String("e2e.bridge", "", "bridge binary to test instead of building ./cmd/bridge")
	flagRace   = flag.Bool("e2e.race", true, "build the bridge with the race detector (a race under fault injection fails the test)")
)

// streamSQL is the stream every e2e test publishes; batchSQL is its batch
// form up to a block (what the independent consumer asks Amp for).
const (
	streamID  = "e2e"
	streamSQL = "SELECT * FROM eth_rpc.transactions SETTINGS stream = true"
)

func batchSQL(upTo uint64) string {
	return fmt.Sprintf("SELECT * FROM eth_rpc.transactions WHERE _block_num <= %d", upTo)
}

// TestMain removes the bridge binary the tests built.
func TestMain(m *testing.M) { bridgetest.Main(m) }

// buildBridge returns the bridge binary, built from ./cmd/bridge once per
// test process (or -e2e.bridge).
func buildBridge(t testing.TB) string {
	t.Helper()
	if *flagBridge != "" {
		p, err := filepath.Abs(*flagBridge)
		require.NoError(t, err)
		return p
	}
	return bridgetest.Build(t, *flagRace)
}

// verifierBin returns the binary that runs `bridge verify`: -e2e.bridge,
// or one built without the race detector. Verify is the oracle here, not
// the code under fault, and the race detector made it about 20 times
// slower: it reads the control topic's lz4 batches, one per event, and
// franz-go's lz4 reader allocates a 4 MiB block for each (the writer's
// default block size), which the race detector's shadow memory pays for.
// In TestIntegrationCluster, verify of its 6 streams took 2 minutes (one
// stream's timed out three times under load); without it, 25 s with the
// build, most of the rest verify's 3 s wait for Amp per stream.
func verifierBin(t testing.TB) string {
	t.Helper()
	if *flagBridge != "" {
		return buildBridge(t)
	}
	return bridgetest.Build(t, false)
}

// miner drives the simulated chain: a block every interval and, every
// reorgEvery blocks, a reorg of 1..maxDepth blocks replaced by depth+1
// new ones. It can be stopped so the bridge can catch up with a fixed head.
type miner struct {
	sim    *ampsim.Server
	stop   chan struct{}
	done   chan struct{}
	mined  atomic.Int64
	reorgs atomic.Int64
}

func startMiner(sim *ampsim.Server, rng *rand.Rand, interval time.Duration, reorgEvery, maxDepth int) *miner {
	m := &miner{sim: sim, stop: make(chan struct{}), done: make(chan struct{})}
	// The rng is used by this goroutine only: derive a private one.
	r := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	go func() {
		defer close(m.done)
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for tick := 1; ; tick++ {
			select {
			case <-m.stop:
				return
			case <-tk.C:
			}
			if reorgEvery > 0 && tick%reorgEvery == 0 {
				d := 1 + r.IntN(maxDepth)
				if sim.Reorg(d, d+1) == nil {
					m.reorgs.Add(1)
					continue
				}
			}
			sim.Mine(1)
			m.mined.Add(1)
		}
	}()
	return m
}

// Stop stops mining and waits for the goroutine; it is idempotent.
func (m *miner) Stop() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// stack is everything one e2e run talks to.
type stack struct {
	bridgetest.Stack
	t     *testing.T
	redis string
	// extra holds settings added to the amp and kafka sections, and to
	// checkpoint (Sections, indented under it) and http (Stream, indented
	// under it).
	extra bridgetest.Config
	// backfill, when set, replaces the stream's backfill section (YAML
	// at the stream's level, starting with "backfill:").
	backfill string
}

// writeConfig writes the YAML the bridge runs with. Topics, the
// transactional id and the Redis keys are named after name, so shared
// services can be used.
func (s *stack) writeConfig(name string) {
	s.t.Helper()
	s.WriteConfig(s.t, bridgetest.Config{
		Name:  name,
		SQL:   streamSQL,
		Amp:   s.extra.Amp,
		Kafka: "compression: lz4\n" + s.extra.Kafka,
		Sections: fmt.Sprintf(`checkpoint:
  store: redis
  redis:
    addr: %s
    key_prefix: %s
%s
http:
  addr: 127.0.0.1:0
%s
log:
  level: info`, s.redis, name, indentYAML(s.extra.Sections, 2), indentYAML(s.extra.Stream, 2)),
		Stream: `retention_blocks: 128
transaction:
  max_rows: 400
  max_age: 100ms
` + cmp.Or(s.backfill, `backfill:
  enabled: true
  workers: 2
  partition_size: 90
  step_blocks: 15
  handover_margin: 12`),
	})
}

// indentYAML indents every line of yaml by n spaces.
func indentYAML(yaml string, n int) string {
	var b strings.Builder
	for line := range strings.Lines(strings.TrimSpace(yaml)) {
		b.WriteString(strings.Repeat(" ", n) + line)
	}
	return strings.TrimRight(b.String(), "\n")
}

// verifyResult is what `bridge verify` printed.
type verifyResult struct {
	exit     int
	out      string
	upTo     uint64
	expected int
	counts   map[string]int // matching, missing, extra, duplicated, unretracted
}

var (
	verifyUpTo   = regexp.MustCompile(`blocks up to (\d+)\)`)
	verifyCounts = regexp.MustCompile(`expected (\d+) rows: (\d+) matching, (\d+) missing, (\d+) extra, (\d+) duplicated, (\d+) unretracted`)
)

func (s *stack) verify(t testing.TB) verifyResult {
	t.Helper()
	return parseVerify(bridgetest.Verify(t, verifierBin(t), s.CfgPath, s.Stream))
}

// parseVerify reads what `bridge verify` printed.
func parseVerify(exit int, out string) verifyResult {
	r := verifyResult{exit: exit, out: out, counts: map[string]int{}}
	if m := verifyUpTo.FindStringSubmatch(r.out); m != nil {
		r.upTo, _ = strconv.ParseUint(m[1], 10, 64)
	}
	if m := verifyCounts.FindStringSubmatch(r.out); m != nil {
		r.expected, _ = strconv.Atoi(m[1])
		for i, k := range []string{"matching", "missing", "extra", "duplicated", "unretracted"} {
			r.counts[k], _ = strconv.Atoi(m[i+2])
		}
	}
	return r
}

// consumerResult is the JSON consume_check.py prints.
type consumerResult struct {
	Topic               string              `json:"topic"`
	Partitions          int                 `json:"partitions"`
	Records             int                 `json:"records"`
	Inserts             int                 `json:"inserts"`
	Retractions         int                 `json:"retractions"`
	Tombstones          int                 `json:"tombstones"`
	RetractedRows       int                 `json:"retracted_rows"`
	TombstonedRows      int                 `json:"tombstoned_rows"`
	Surviving           int                 `json:"surviving"`
	DuplicateKeys       int                 `json:"duplicate_keys"`
	Reinserted          int                 `json:"reinserted"`
	DanglingRetractions int                 `json:"dangling_retractions"`
	DuplicateIdentities int                 `json:"duplicate_identities"`
	HeaderErrors        int                 `json:"header_errors"`
	EnvelopeErrors      int                 `json:"envelope_errors"`
	WireErrors          int                 `json:"wire_errors"`
	RegistryErrors      int                 `json:"registry_errors"`
	SchemaIDs           []int               `json:"schema_ids"`
	SubjectIDs          []int               `json:"subject_ids"`
	Identities          [][]json.RawMessage `json:"identities"`
	RowsSHA256          string              `json:"rows_sha256"`
	Amp                 *struct {
		Expected   int    `json:"expected"`
		Matching   int    `json:"matching"`
		Missing    int    `json:"missing"`
		Extra      int    `json:"extra"`
		RowsSHA256 string `json:"rows_sha256"`
	} `json:"amp"`
	Examples map[string][]string `json:"examples"`
}

// consume runs the independent consumer over the data topic and compares
// the surviving rows with Amp's rows up to upTo (a batch query at the
// simulator, done by the script with pyarrow.flight).
func (s *stack) consume(t testing.TB, python string, upTo uint64) consumerResult {
	t.Helper()
	res, err := s.runConsumer(python, upTo)
	require.NoError(t, err)
	return res
}

// runConsumer is consume without a test: it may run on any goroutine.
func (s *stack) runConsumer(python string, upTo uint64) (consumerResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The tests run in their package's directory.
	script, err := filepath.Abs(filepath.Join("testdata", "consume_check.py"))
	if err != nil {
		return consumerResult{}, fmt.Errorf("finding consume_check.py: %w", err)
	}
	cmd := exec.CommandContext(ctx, python, script,
		"--bootstrap", strings.Join(s.Brokers, ","), "--registry", s.Registry, "--topic", s.Topic,
		"--flight", s.Sim.Addr(), "--sql", batchSQL(upTo), "--timeout", "120")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return consumerResult{}, fmt.Errorf("running consume_check.py on %s: %w\n%s", s.Topic, err, stderr.String())
	}
	var res consumerResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return consumerResult{}, fmt.Errorf("parsing consume_check.py output: %w\n%s", err, stdout.String())
	}
	return res, nil
}

// identityKey renders one identity triple (block, block hash, tx index) as
// the consumer prints it in JSON.
func identityKey(parts []json.RawMessage) string {
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = string(p)
	}
	return strings.Join(s, "/")
}

// expectedIdentities are the (block, block hash, tx index) of every
// transaction of the canonical chain from its first block up to upTo.
func expectedIdentities(t testing.TB, sim *ampsim.Server, upTo uint64) map[string]bool {
	t.Helper()
	ch := sim.Primary()
	out := map[string]bool{}
	for n := ch.FirstBlock(); n <= upTo; n++ {
		h, ok := ch.BlockHash(n)
		require.True(t, ok, "block %d is not canonical", n)
		rows, err := ch.ExpectedRows("transactions", n, n)
		require.NoError(t, err)
		for i := range rows {
			out[fmt.Sprintf(`%d/"0x%x"/%d`, n, h[:], i)] = true
		}
	}
	return out
}

// grepCount counts the lines of a file that contain s.
func grepCount(path, s string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(s))
}

// grepLines returns the lines of the file at path that contain s, joined
// by newlines (for a failure message: what a log said, not just how often).
func grepLines(path, s string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var out []string
	for l := range bytes.Lines(b) {
		if bytes.Contains(l, []byte(s)) {
			out = append(out, string(bytes.TrimRight(l, "\n")))
		}
	}
	return strings.Join(out, "\n")
}

// trialLog is a goroutine-safe trial log that is also written to a file kept
// next to the bridge logs.
type trialLog struct {
	mu sync.Mutex
	t  testing.TB
	f  *os.File
}

func (l *trialLog) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Helper()
	l.t.Logf(format, args...)
	if l.f != nil {
		fmt.Fprintf(l.f, format+"\n", args...)
	}
}
