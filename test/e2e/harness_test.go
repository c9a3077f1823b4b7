package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
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

// moduleRoot is the directory of go.mod (the tests run in test/e2e).
func moduleRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "test/e2e must run from the module (go.mod two directories up)")
	return root
}

// buildBridge builds ./cmd/bridge into a temporary directory (or returns
// -e2e.bridge).
func buildBridge(t testing.TB) string {
	t.Helper()
	if *flagBridge != "" {
		p, err := filepath.Abs(*flagBridge)
		require.NoError(t, err)
		return p
	}
	out := filepath.Join(t.TempDir(), "bridge")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"build", "-o", out}
	if *flagRace {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/bridge")...)
	cmd.Dir = moduleRoot(t)
	start := time.Now()
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building ./cmd/bridge:\n%s", b)
	t.Logf("built bridge (race detector %v) in %s", *flagRace, time.Since(start).Round(time.Millisecond))
	return out
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

// bridgeProc is one running `bridge run` process.
type bridgeProc struct {
	cmd   *exec.Cmd
	log   string
	start time.Time
	done  chan struct{}
	err   error
}

func startBridge(t testing.TB, bin, cfg, logPath string, args ...string) *bridgeProc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer f.Close()
	cmd := exec.CommandContext(context.Background(), bin, append([]string{"run", "-c", cfg}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = bridgeEnv()
	setDeathSignal(cmd)
	require.NoError(t, cmd.Start())
	p := &bridgeProc{cmd: cmd, log: logPath, start: time.Now(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill9)
	return p
}

// bridgeEnv is the environment of bridge processes: the test's, without
// BRIDGE_ variables that would override the YAML file.
func bridgeEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BRIDGE_") {
			out = append(out, kv)
		}
	}
	return out
}

func (p *bridgeProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *bridgeProc) kill9() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and waits up to grace for the exit; it returns the exit
// code (-1 when it had to kill the process).
func (p *bridgeProc) term(grace time.Duration) int {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill9()
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// stack is everything one e2e run talks to.
type stack struct {
	t        *testing.T
	sim      *ampsim.Server
	brokers  []string
	redis    string
	registry string
	dir      string
	bin      string
	cfgPath  string
	topic    string
	control  string
}

// writeConfig writes the YAML the bridge runs with. Topics, the
// transactional id and the Redis keys are named after name, so shared
// services can be used.
func (s *stack) writeConfig(name string) {
	s.t.Helper()
	cfg := fmt.Sprintf(`amp:
  addr: %[1]s
  reconnect_min: 50ms
  reconnect_max: 1s
kafka:
  brokers: [%[2]s]
  transactional_id_prefix: %[3]s
  control_topic: %[3]s.control
  replication_factor: 1
  compression: lz4
registry:
  url: %[4]s
checkpoint:
  store: redis
  redis:
    addr: %[5]s
    key_prefix: %[3]s
http:
  addr: 127.0.0.1:0
log:
  level: info
streams:
  - id: %[6]s
    sql: %[7]q
    topic: %[3]s.transactions
    partitions: 2
    retention_blocks: 128
    transaction:
      max_rows: 400
      max_age: 100ms
    backfill:
      enabled: true
      workers: 2
      partition_size: 90
      step_blocks: 15
      handover_margin: 12
`, s.sim.Addr(), strings.Join(s.brokers, ", "), name, s.registry, s.redis, streamID, streamSQL)
	s.topic = name + ".transactions"
	s.control = name + ".control"
	s.cfgPath = filepath.Join(s.dir, "bridge.yaml")
	require.NoError(s.t, os.WriteFile(s.cfgPath, []byte(cfg), 0o644))
}

// committed returns the cursor point of the newest committed watermark of
// the stream in the control topic (ok false when there is none yet).
func (s *stack) committed(ctx context.Context) (reorg.Point, bool, error) {
	kc := sink.DefaultConfig()
	kc.Brokers = s.brokers
	r, err := sink.NewReader(ctx, kc, sink.Deps{})
	if err != nil {
		return reorg.Point{}, false, err
	}
	defer r.Close()
	read, err := r.ReadControl(ctx, s.control, -1)
	if err != nil {
		return reorg.Point{}, false, err
	}
	codec, err := encode.NewControlCodec()
	if err != nil {
		return reorg.Point{}, false, err
	}
	var pt reorg.Point
	found := false
	for _, rec := range read.Records {
		if string(rec.Key) != streamID || rec.Value == nil {
			continue
		}
		ev, err := codec.Decode(rec.Value)
		if err != nil {
			return reorg.Point{}, false, fmt.Errorf("decoding control record %d: %w", rec.Offset, err)
		}
		if ev.Watermark == nil {
			continue
		}
		if p, ok := ev.Watermark.Cursor[ampsim.DefaultNetwork]; ok {
			pt, found = p, true
		}
	}
	return pt, found, nil
}

// waitCaughtUp waits until the newest committed watermark is the simulator's
// head (number and hash).
func (s *stack) waitCaughtUp(ctx context.Context, p *bridgeProc) (uint64, error) {
	head, ok := s.sim.Head()
	if !ok {
		return 0, errors.New("the simulator has no blocks")
	}
	want, _ := s.sim.BlockHash(head)
	var last reorg.Point
	var lastErr error
	for {
		if p.exited() {
			return 0, fmt.Errorf("bridge exited while catching up (%w); log tail:\n%s", errOr(p.err, "exit status 0"), tail(p.log, 40))
		}
		pt, ok, err := s.committed(ctx)
		if err == nil && ok {
			last = pt
			if pt.Number == head && pt.Hash == want {
				return head, nil
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("bridge did not commit the head %d (newest watermark %d, read error %w): %w; log tail:\n%s",
				head, last.Number, errOr(lastErr, "none"), ctx.Err(), tail(p.log, 40))
		case <-time.After(300 * time.Millisecond):
		}
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, "verify", "-c", s.cfgPath, "-stream", streamID)
	cmd.Env = bridgeEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err, "running bridge verify")
	}
	r := verifyResult{exit: cmd.ProcessState.ExitCode(), out: stdout.String() + stderr.String(), counts: map[string]int{}}
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	script := filepath.Join(moduleRoot(t), "test", "e2e", "testdata", "consume_check.py")
	cmd := exec.CommandContext(ctx, python, script,
		"--bootstrap", strings.Join(s.brokers, ","), "--registry", s.registry, "--topic", s.topic,
		"--flight", s.sim.Addr(), "--sql", batchSQL(upTo), "--timeout", "120")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "running consume_check.py:\n%s", stderr.String())
	var res consumerResult
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "parsing consume_check.py output:\n%s", stdout.String())
	return res
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

// tail returns the last n lines of a file, for failure messages.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// grepCount counts the lines of a file that contain s.
func grepCount(path, s string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(s))
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

// errOr returns err, or an error reading none when err is nil, so that a
// message can wrap an error that may be absent without printing %!w(<nil>).
func errOr(err error, none string) error {
	if err == nil {
		return errors.New(none)
	}
	return err
}
