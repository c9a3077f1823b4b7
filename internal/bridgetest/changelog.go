package bridgetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// ChangelogTest is a test that a consumer, a Java program built with Maven,
// reads a data topic of the bridge as a changelog: test/flink and
// test/kstreams. Start sets it up.
type ChangelogTest struct {
	// Service is the consumer's name: the service of BRIDGE_TEST_REQUIRE
	// and deploy/local/stack.sh for its tools, its directory test/<Service>
	// (StartJavaBuild), the stream's id and the prefix of the runs' names.
	Service string
	// What names the consumer in failure messages: "Flink".
	What string
	// Jar is the consumer's jar in its build directory's lib/.
	Jar string
	// SQL is the stream's query.
	SQL string
}

// Changelog is a started ChangelogTest.
type Changelog struct {
	ChangelogTest
	// Root is the module's root directory.
	Root string
	// Started is when Start began.
	Started time.Time
	// Java delivers the consumer's build (StartJavaBuild).
	Java <-chan JavaBuild
	// Sim is the simulator every run reads.
	Sim *ampsim.Server
	// Name is the first run's name (testenv.UniqueName).
	Name string
	// Stack is the first run.
	Stack *Stack
	// Proc is the first run's bridge.
	Proc *Proc

	brokers  []string
	registry string
	bin      string
}

// Start sets the test up: it skips it when the real Kafka broker, the
// registry, java or mvn are missing (or fails it, as testenv.RequireReal and
// RequireTools do); starts the consumer's build (StartJavaBuild: mvn, or the
// cached build in .local/<Service>/), which goes on while the bridge is
// built and publishes; builds the bridge (Build, so the package's TestMain
// must call Main); starts a simulator with 12 blocks of 4 transactions; and
// starts the first run (StartRun).
func (c ChangelogTest) Start(t *testing.T) *Changelog {
	t.Helper()
	seeds := testenv.RequireReal(t, testenv.ServiceKafka, testenv.EnvKafkaSeeds)
	registry := testenv.RequireReal(t, testenv.ServiceRegistry, testenv.EnvRegistryURL)
	RequireTools(t, c.Service, c.What, "java", "mvn")
	cl := &Changelog{ChangelogTest: c, Root: ModuleRoot(t), Started: time.Now(), brokers: testenv.Seeds(seeds), registry: registry}
	cl.Java = StartJavaBuild(cl.Root, c.Service, c.Jar)
	cl.bin = Build(t, RaceEnabled)
	cl.Sim = StartSim(t, ampsim.NetworkConfig{InitialBlocks: 12, TxPerBlock: 4, LogsPerTx: -1})
	cl.Name = testenv.UniqueName(t, c.Service)
	cl.Stack, cl.Proc = cl.StartRun(t, cl.Name)
	return cl
}

// StartRun starts a bridge run named name, with its own directory and the
// YAML of WriteChangelogConfig (streamExtra added to the stream's
// settings), that publishes the simulator's rows to its own topics. The
// topics (and those of the run's Apps) are deleted when the test ends; the
// bridge's log is kept when the test fails (KeepLogOnFailure).
func (c *Changelog) StartRun(t testing.TB, name string, streamExtra ...string) (*Stack, *Proc) {
	t.Helper()
	s := &Stack{Sim: c.Sim, Brokers: c.brokers, Registry: c.registry, Dir: t.TempDir(), Bin: c.bin, Stream: c.Service}
	s.WriteChangelogConfig(t, name, c.SQL, streamExtra...)
	t.Cleanup(func() { s.DeleteTopics(t) })
	log := filepath.Join(s.Dir, "bridge.log")
	KeepLogOnFailure(t, log, name)
	return s, Start(t, c.bin, s.CfgPath, log)
}

// WriteChangelogConfig writes the config of the changelog tests (test/flink,
// test/kstreams) with WriteConfig: the stream publishes sql in transactions
// of at most 40 rows or 100ms, with the lines of streamExtra added to its
// settings; the checkpoint is a file store in Dir/checkpoint (Redis is not
// what these tests are about) and the HTTP server is off. Topics and the
// transactional id are named after name, so the shared broker can be used.
func (s *Stack) WriteChangelogConfig(t testing.TB, name, sql string, streamExtra ...string) {
	t.Helper()
	s.WriteConfig(t, Config{
		Name: name,
		SQL:  sql,
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

// KeepLogOnFailure registers a cleanup that copies the bridge's log at
// logPath (in a temporary directory of the test, which goes) to
// <os.TempDir()>/<name>-bridge.log when the test has failed.
func KeepLogOnFailure(t testing.TB, logPath, name string) {
	t.Cleanup(func() {
		if t.Failed() {
			keep := filepath.Join(os.TempDir(), name+"-bridge.log")
			if b, err := os.ReadFile(logPath); err == nil && os.WriteFile(keep, b, 0o644) == nil {
				t.Logf("bridge log kept in %s", keep)
			}
		}
	})
}

// DeleteTopics removes the run's topics from the shared broker; with Apps,
// also their consumer groups and internal topics (<application id>-...).
// It only logs what fails.
func (s *Stack) DeleteTopics(t testing.TB) {
	apps := s.Apps
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
	if err != nil {
		t.Logf("deleting topics: %v", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	topics := []string{s.Topic, s.Control}
	if len(apps) > 0 {
		all, err := adm.ListTopics(ctx)
		if err != nil {
			t.Logf("listing topics: %v", err)
		}
		for _, name := range all.Names() {
			for _, app := range apps {
				if strings.HasPrefix(name, app+"-") {
					topics = append(topics, name)
				}
			}
		}
		if resp, err := adm.DeleteGroups(ctx, apps...); err != nil || resp.Error() != nil {
			if err == nil {
				err = resp.Error()
			}
			t.Logf("deleting groups %v: %v", apps, err)
		}
	}
	if resp, err := adm.DeleteTopics(ctx, topics...); err != nil || resp.Error() != nil {
		if err == nil {
			err = resp.Error()
		}
		t.Logf("deleting topics %v: %v", topics, err)
	}
}

// RequireCaughtUp waits (2 minutes at most, asking every 200ms) until the
// bridge p has committed the simulator's head (WaitCaughtUp) and returns
// the head; it fails the test when that does not happen.
func (s *Stack) RequireCaughtUp(ctx context.Context, t testing.TB, p *Proc) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	head, err := s.WaitCaughtUp(ctx, p, 200*time.Millisecond)
	require.NoError(t, err)
	return head
}

// VerifyReport is what `bridge verify` printed (Stack.Verify); the counts
// are 0 when its output does not have them.
type VerifyReport struct {
	// Exit is its exit code.
	Exit int
	// Out is its output, for failure messages.
	Out string
	// UpTo is the block it read up to.
	UpTo uint64
	// Records is how many records of the data topic it read.
	Records int
	// Retracted is how many rows the topic retracted (op=d).
	Retracted int
	// Expected is how many rows Amp has up to UpTo.
	Expected int
}

// Verify runs `bridge verify` for the stream (the package's Verify): the
// bridge's own comparison of the topic with Amp, a cross-check of the topic
// a consumer then reads.
func (s *Stack) Verify(t testing.TB) VerifyReport {
	t.Helper()
	var r VerifyReport
	r.Exit, r.Out = Verify(t, s.Bin, s.CfgPath, s.Stream)
	head := regexp.MustCompile(`blocks up to (\d+)\): (\d+) records read, (\d+) rows retracted`)
	if m := head.FindStringSubmatch(r.Out); m != nil {
		r.UpTo, _ = strconv.ParseUint(m[1], 10, 64)
		r.Records, _ = strconv.Atoi(m[2])
		r.Retracted, _ = strconv.Atoi(m[3])
	}
	if m := regexp.MustCompile(`expected (\d+) rows: `).FindStringSubmatch(r.Out); m != nil {
		r.Expected, _ = strconv.Atoi(m[1])
	}
	return r
}

// Published is what PublishWithReorgs leaves for the consumer to read.
type Published struct {
	// UpTo is the head the bridge committed last.
	UpTo uint64
	// Stale are Amp's rows of the table (AmpRows, every column) before the
	// last reorg: the wrong expectation of RequireStaleDetected.
	Stale []string
	// Verify is what bridge verify reported.
	Verify VerifyReport
	// Stopped is when the bridge had exited.
	Stopped time.Time
}

// PublishWithReorgs lets the bridge p publish table while the simulator
// mines 20 blocks in 2.4s with 4 reorgs between them (each of 3 blocks,
// replaced by 4), so that some hit committed batches and some the
// open transaction, and waits until p has committed the head. Then it keeps
// Amp's rows, reorganises 2 committed blocks into 3 (retractions only of
// committed rows), waits again and stops p, which must exit 0. Last it runs
// bridge verify, which must pass, up to the head, having seen retractions.
func (s *Stack) PublishWithReorgs(ctx context.Context, t testing.TB, p *Proc, table string) Published {
	t.Helper()
	for i := range 24 {
		time.Sleep(100 * time.Millisecond)
		if i%6 == 5 {
			d := 1 + i%3
			require.NoError(t, s.Sim.Reorg(d, d+1))
			continue
		}
		s.Sim.Mine(1)
	}
	s.RequireCaughtUp(ctx, t, p)

	head, _ := s.Sim.Head()
	stale := s.AmpRows(ctx, t, table, head, nil)
	require.NoError(t, s.Sim.Reorg(2, 3))
	upTo := s.RequireCaughtUp(ctx, t, p)
	require.Equal(t, 0, p.Term(30*time.Second), "bridge exit code; log tail:\n%s", p.Tail(30))
	stopped := time.Now()

	v := s.Verify(t)
	require.Equal(t, 0, v.Exit, "bridge verify:\n%s", v.Out)
	require.Equal(t, upTo, v.UpTo, "bridge verify:\n%s", v.Out)
	require.Positive(t, v.Retracted, "the reorgs retracted nothing; bridge verify:\n%s", v.Out)
	return Published{UpTo: upTo, Stale: stale, Verify: v, Stopped: stopped}
}
