package testenv

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaBroker is a private real Apache Kafka broker (single-node KRaft,
// transactions on, replication factor 1) for tests that stop, kill or
// restart a broker; the shared broker of `make services` must not be
// disturbed because other test binaries use it at the same time.
type KafkaBroker struct {
	t     testing.TB
	java  string
	home  string
	dir   string
	port  int
	cport int
	p     *Process
	extra []string // server.properties lines after the defaults
	// advertise, when set, returns the address clients are sent to in
	// metadata; inter-broker traffic then uses a listener of its own.
	advertise func(addr string) string
	clientAt  string // what advertise returned
	iport     int
}

// BrokerOption configures StartKafkaBroker.
type BrokerOption func(*KafkaBroker)

// WithProperties appends lines ("key=value") to the broker's
// server.properties; a key given again overrides the default.
func WithProperties(lines ...string) BrokerOption {
	return func(k *KafkaBroker) { k.extra = append(k.extra, lines...) }
}

// WithAdvertisedAddr makes the broker advertise to its clients the address
// advertise returns, given the broker's own client address (host:port, the
// same as Addr): typically a Proxy's to that address, so that all client
// traffic, not only the first bootstrap request, goes through it. The
// broker's own inter-broker traffic (its transaction coordinator writing
// markers to itself) uses a third listener that bypasses it.
func WithAdvertisedAddr(advertise func(addr string) string) BrokerOption {
	return func(k *KafkaBroker) { k.advertise = advertise }
}

const brokerLog4j = `status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
`

// StartKafkaBroker formats and starts a private broker from the jars in
// BRIDGE_TEST_KAFKA_HOME on free ports of 127.0.0.1, and waits until it
// answers Metadata and CreateTopics (a few seconds). It is stopped and its
// data removed when the test ends. When the variable is unset the test fails
// if BRIDGE_TEST_REQUIRE names kafka, and is skipped otherwise.
func StartKafkaBroker(t testing.TB, opts ...BrokerOption) *KafkaBroker {
	t.Helper()
	home := RequireReal(t, ServiceKafka, EnvKafkaHome)
	java, err := exec.LookPath("java")
	if err != nil {
		t.Fatalf("%s is set but java is not on PATH: install a JDK 17+", EnvKafkaHome)
	}
	k := &KafkaBroker{t: t, java: java, home: home, dir: t.TempDir()}
	for _, o := range opts {
		o(k)
	}
	if k.port, err = freePort(); err == nil {
		k.cport, err = freePort()
	}
	if err == nil && k.advertise != nil {
		k.iport, err = freePort()
		k.clientAt = k.advertise(k.Addr())
	}
	if err != nil {
		t.Fatalf("starting kafka broker: %v", err)
	}
	if err := k.format(); err != nil {
		t.Fatalf("formatting kafka broker storage: %v", err)
	}
	t.Cleanup(func() {
		if k.p != nil {
			k.p.Term(30 * time.Second)
		}
	})
	if err := k.start(); err != nil {
		t.Fatalf("starting kafka broker: %v", err)
	}
	return k
}

// Addr returns the broker's host:port; it stays the same across Restart.
func (k *KafkaBroker) Addr() string { return "127.0.0.1:" + strconv.Itoa(k.port) }

// AdvertisedAddr returns the address the broker advertises to clients:
// Addr, or what WithAdvertisedAddr's function returned.
func (k *KafkaBroker) AdvertisedAddr() string {
	if k.clientAt != "" {
		return k.clientAt
	}
	return k.Addr()
}

// Pid returns the process id of the running broker (0 when stopped).
func (k *KafkaBroker) Pid() int {
	if k.p == nil || k.p.Exited() {
		return 0
	}
	return k.p.cmd.Process.Pid
}

// LogPath returns the file the broker's output goes to.
func (k *KafkaBroker) LogPath() string { return k.logPath() }

// Backend returns the broker as a real Kafka Backend.
func (k *KafkaBroker) Backend() Backend {
	return Backend{Name: "private-kafka", Addr: k.Addr(), Real: true}
}

// Kill9 kills the broker with SIGKILL and waits for it to exit.
func (k *KafkaBroker) Kill9() {
	if k.p != nil {
		k.p.Kill9()
	}
}

// Stop shuts the broker down cleanly (SIGTERM; SIGKILL after 30 s).
func (k *KafkaBroker) Stop() {
	if k.p != nil {
		k.p.Term(30 * time.Second)
	}
}

// Restart starts the broker again on the same ports and data (killing a
// running one first) and waits until it is ready.
func (k *KafkaBroker) Restart() {
	k.t.Helper()
	k.Kill9()
	if err := k.start(); err != nil {
		k.t.Fatalf("restarting kafka broker: %v", err)
	}
}

func (k *KafkaBroker) logPath() string { return filepath.Join(k.dir, "kafka.log") }

func (k *KafkaBroker) jvmArgs() []string {
	tmp := filepath.Join(k.dir, "tmp")
	return []string{
		"-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExplicitGCInvokesConcurrent",
		"-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + filepath.Join(k.dir, "log4j2.properties"),
		"-Dkafka.logs.dir=" + filepath.Join(k.dir, "logs"),
		"-Djava.io.tmpdir=" + tmp, "-DZstdTempFolder=" + tmp, "-Dorg.xerial.snappy.tempdir=" + tmp,
		"-cp", filepath.Join(k.home, "*"),
	}
}

func (k *KafkaBroker) format() error {
	for _, d := range []string{"data", "logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(k.dir, d), 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	props := fmt.Sprintf(`process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:%[2]d
listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d
advertised.listeners=PLAINTEXT://127.0.0.1:%[1]d
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=%[3]s
num.network.threads=2
num.io.threads=2
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# A restarted (killed) broker must wait out its old session before it re-registers:
# 3 s instead of 9 s.
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
`, k.port, k.cport, filepath.Join(k.dir, "data"))
	if k.advertise != nil {
		props += fmt.Sprintf(`listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d,INTERNAL://127.0.0.1:%[3]d
advertised.listeners=PLAINTEXT://%[4]s,INTERNAL://127.0.0.1:%[3]d
inter.broker.listener.name=INTERNAL
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT
`, k.port, k.cport, k.iport, k.clientAt)
	}
	if len(k.extra) > 0 {
		props += strings.Join(k.extra, "\n") + "\n"
	}
	if err := os.WriteFile(filepath.Join(k.dir, "server.properties"), []byte(props), 0o644); err != nil {
		return fmt.Errorf("writing server.properties: %w", err)
	}
	if err := os.WriteFile(filepath.Join(k.dir, "log4j2.properties"), []byte(brokerLog4j), 0o644); err != nil {
		return fmt.Errorf("writing log4j2.properties: %w", err)
	}
	args := append(k.jvmArgs(), "kafka.tools.StorageTool", "format",
		"-t", clusterID(), "-c", filepath.Join(k.dir, "server.properties"), "--ignore-formatted")
	out, err := exec.CommandContext(context.Background(), k.java, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("running StorageTool format: %w: %s", err, out)
	}
	return nil
}

// clusterID returns a random Kafka Uuid string (16 bytes, base64url without
// padding), not starting with '-' as Kafka's own Uuid.randomUuid ensures.
func clusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		s := base64.RawURLEncoding.EncodeToString(b[:])
		if !strings.HasPrefix(s, "-") {
			return s
		}
	}
}

func (k *KafkaBroker) start() error {
	args := append(k.jvmArgs(), "kafka.Kafka", filepath.Join(k.dir, "server.properties"))
	cmd := exec.CommandContext(context.Background(), k.java, args...)
	p, err := StartProcess(cmd, k.logPath())
	if err != nil {
		return err
	}
	k.p = p
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		if p.Exited() {
			return fmt.Errorf("%w: %w; log:\n%s", errExited, p.Err(), Tail(k.logPath(), 30))
		}
		err := brokerReady(ctx, k.Addr())
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			p.Kill9()
			return fmt.Errorf("waiting for broker on %s: %w; log:\n%s", k.Addr(), err, Tail(k.logPath(), 30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// brokerReady does Metadata and a CreateTopics/DeleteTopics round trip.
func brokerReady(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestRetries(1))
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.BrokerMetadata(ctx); err != nil {
		return fmt.Errorf("requesting metadata: %w", err)
	}
	topic := "testenv-ready-" + clusterID()[:8]
	resp, err := adm.CreateTopic(ctx, 1, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("creating topic: %w", err)
	}
	dresp, err := adm.DeleteTopic(ctx, topic)
	if err == nil {
		err = dresp.Err
	}
	if err != nil {
		return fmt.Errorf("deleting topic: %w", err)
	}
	return nil
}
