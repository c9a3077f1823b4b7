package testenv

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/tlsconfig"
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
	sec       *SecurityConfig
	pki       *PKI
	adminPass string // the super user's password (Authorizer)
	more      []listener
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

// SecurityConfig secures the broker's client listener (the one at Addr);
// the controller and the inter-broker listener stay plaintext, on ports of
// their own, so only client traffic is affected.
type SecurityConfig struct {
	// TLS makes the client listener speak TLS with a server certificate of
	// a PKI made for the broker (see KafkaBroker.PKI and ClientTLS).
	TLS bool
	// ClientAuth requires a client certificate signed by that PKI's CA
	// (ssl.client.auth=required); it needs TLS.
	ClientAuth bool
	// SASL is "" (off), "PLAIN" or "SCRAM-SHA-512": SASL_SSL with TLS,
	// SASL_PLAINTEXT without.
	SASL string
	// Users are the SASL users and their passwords (SCRAM users are added at
	// format time with --add-scram, so neither may hold "," "[" "]" or "=").
	Users map[string]string
	// Authorizer turns on KRaft's StandardAuthorizer with
	// allow.everyone.if.no.acl.found=false: a client may do only what an
	// ACL allows its principal (User:<SASL user>, User:CN=<subject> for a
	// client certificate without SASL, User:ANONYMOUS for TLS alone). The
	// controller and inter-broker listeners then need SASL PLAIN as the
	// super user testenv-admin (a random password), so that no client
	// principal is a super user; KafkaBroker.Admin connects as it and
	// creates the ACLs.
	Authorizer bool
}

// AdminUser is the super user of a broker with SecurityConfig.Authorizer.
const AdminUser = "testenv-admin"

// WithSecurity secures the broker's client listener as s says.
func WithSecurity(s SecurityConfig) BrokerOption {
	return func(k *KafkaBroker) { k.sec = &s }
}

// WithListener adds a further client listener, named name (letters only,
// e.g. "MTLS"), on a free port of its own (ListenerAddr), secured as s says:
// one broker then serves clients of several kinds (TLS, mutual TLS, SASL
// mechanisms), which is cheaper than a broker each. It needs WithSecurity;
// Authorizer is the broker's (WithSecurity's) for every listener, and the
// PKI is shared.
func WithListener(name string, s SecurityConfig) BrokerOption {
	return func(k *KafkaBroker) { k.more = append(k.more, listener{name: strings.ToUpper(name), sec: s}) }
}

// listener is a further client listener of WithListener.
type listener struct {
	name string
	port int
	sec  SecurityConfig
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
	// Every listener's port in one call, so that no two are the same.
	ports, err := freePorts(3 + len(k.more))
	if err != nil {
		t.Fatalf("starting kafka broker: %v", err)
	}
	k.port, k.cport = ports[0], ports[1]
	if k.advertise != nil || k.sec != nil {
		k.iport = ports[2]
	}
	if k.advertise != nil {
		k.clientAt = k.advertise(k.Addr())
	}
	if len(k.more) > 0 && k.sec == nil {
		t.Fatalf("starting kafka broker: WithListener needs WithSecurity")
	}
	for i := range k.more {
		k.more[i].port = ports[3+i]
		if k.more[i].name == "" || strings.Trim(k.more[i].name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" ||
			slices.Contains([]string{"CLIENT", "CONTROLLER", "INTERNAL", "PLAINTEXT"}, k.more[i].name) {
			t.Fatalf("starting kafka broker: WithListener name %q must be letters, and not CLIENT, CONTROLLER, INTERNAL or PLAINTEXT", k.more[i].name)
		}
	}
	if k.sec != nil {
		for _, l := range k.listeners() {
			if l.sec.ClientAuth && !l.sec.TLS {
				t.Fatalf("starting kafka broker: SecurityConfig.ClientAuth of listener %s needs TLS", l.name)
			}
			switch l.sec.SASL {
			case "", "PLAIN", "SCRAM-SHA-512":
			default:
				t.Fatalf("starting kafka broker: SecurityConfig.SASL %q of listener %s is not \"\", PLAIN or SCRAM-SHA-512", l.sec.SASL, l.name)
			}
			if l.sec.TLS && k.pki == nil {
				k.pki = NewPKI(t)
			}
		}
		if k.sec.Authorizer {
			k.adminPass = clusterID()
		}
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

// ListenerAddr returns the host:port of the listener of WithListener named
// name ("" if there is none).
func (k *KafkaBroker) ListenerAddr(name string) string {
	for _, l := range k.more {
		if l.name == strings.ToUpper(name) {
			return "127.0.0.1:" + strconv.Itoa(l.port)
		}
	}
	return ""
}

// listeners returns the secured client listeners: CLIENT (WithSecurity) at
// Addr, then WithListener's.
func (k *KafkaBroker) listeners() []listener {
	return append([]listener{{name: "CLIENT", port: k.port, sec: *k.sec}}, k.more...)
}

// PKI returns the certificates of a TLS broker (WithSecurity), nil otherwise.
func (k *KafkaBroker) PKI() *PKI { return k.pki }

// ClientTLS returns the client TLS setting for a TLS broker: its CA, and
// with clientCert also the client certificate and key. It is disabled for a
// broker without TLS.
func (k *KafkaBroker) ClientTLS(clientCert bool) tlsconfig.Config {
	if k.pki == nil {
		return tlsconfig.Config{}
	}
	c := tlsconfig.Config{Enabled: true, CAFile: k.pki.CAFile}
	if clientCert {
		c.CertFile, c.KeyFile = k.pki.ClientCertFile, k.pki.ClientKeyFile
	}
	return c
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
	switch {
	case k.sec != nil:
		props += k.securityProps()
	case k.advertise != nil:
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
	if k.sec != nil {
		scram := map[string]string{}
		for _, l := range k.listeners() {
			if l.sec.SASL == "SCRAM-SHA-512" {
				maps.Copy(scram, l.sec.Users)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(scram)) {
			args = append(args, "--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", name, scram[name]))
		}
	}
	out, err := exec.CommandContext(context.Background(), k.java, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("running StorageTool format: %w: %s", err, out)
	}
	return nil
}

// securityProps returns the server.properties lines of WithSecurity and
// WithListener: the client listener CLIENT (SSL, SASL_SSL or
// SASL_PLAINTEXT) at Addr, the further ones, and an INTERNAL listener for
// inter-broker traffic (plaintext, or SASL PLAIN as the super user with an
// Authorizer, like the controller's).
func (k *KafkaBroker) securityProps() string {
	inner := "PLAINTEXT"
	if k.sec.Authorizer {
		inner = "SASL_PLAINTEXT"
	}
	ls := k.listeners()
	var names, advertised, protos []string
	for _, l := range ls {
		addr := "127.0.0.1:" + strconv.Itoa(l.port)
		if l.name == "CLIENT" {
			addr = k.AdvertisedAddr()
		}
		names = append(names, fmt.Sprintf("%s://127.0.0.1:%d", l.name, l.port))
		advertised = append(advertised, l.name+"://"+addr)
		protos = append(protos, l.name+":"+l.sec.protocol())
	}
	var b strings.Builder
	fmt.Fprintf(&b, `listeners=%[1]s,CONTROLLER://127.0.0.1:%[2]d,INTERNAL://127.0.0.1:%[3]d
advertised.listeners=%[4]s,INTERNAL://127.0.0.1:%[3]d
inter.broker.listener.name=INTERNAL
listener.security.protocol.map=CONTROLLER:%[6]s,%[5]s,INTERNAL:%[6]s
`, strings.Join(names, ","), k.cport, k.iport, strings.Join(advertised, ","), strings.Join(protos, ","), inner)
	if k.sec.Authorizer {
		// The broker talks to its own controller and to itself as the super
		// user; a client principal (ANONYMOUS on a TLS listener, too) is not one.
		jaas := fmt.Sprintf(`org.apache.kafka.common.security.plain.PlainLoginModule required username="%[1]s" password="%[2]s" user_%[1]s="%[2]s";`,
			AdminUser, k.adminPass)
		fmt.Fprintf(&b, `authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:%[1]s
sasl.mechanism.controller.protocol=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=%[2]s
listener.name.internal.sasl.enabled.mechanisms=PLAIN
listener.name.internal.plain.sasl.jaas.config=%[2]s
`, AdminUser, jaas)
	}
	// A properties value is one line: "\n" escapes become newlines on load.
	inline := func(path string) string {
		pem, err := os.ReadFile(path)
		if err != nil {
			k.t.Fatalf("reading %s: %v", path, err)
		}
		return strings.ReplaceAll(strings.TrimSpace(string(pem)), "\n", `\n`)
	}
	// JAAS string literals: a backslash or a quote would need escaping.
	quote := func(s string) string { return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) }
	for _, l := range ls {
		n := strings.ToLower(l.name)
		if l.sec.TLS {
			fmt.Fprintf(&b, "listener.name.%s.ssl.keystore.type=PEM\n", n)
			fmt.Fprintf(&b, "listener.name.%s.ssl.keystore.certificate.chain=%s\n", n, inline(k.pki.ServerCertFile))
			fmt.Fprintf(&b, "listener.name.%s.ssl.keystore.key=%s\n", n, inline(k.pki.ServerKeyFile))
			if l.sec.ClientAuth {
				fmt.Fprintf(&b, "listener.name.%s.ssl.client.auth=required\n", n)
				fmt.Fprintf(&b, "listener.name.%s.ssl.truststore.type=PEM\n", n)
				fmt.Fprintf(&b, "listener.name.%s.ssl.truststore.certificates=%s\n", n, inline(k.pki.CAFile))
			}
		}
		switch l.sec.SASL {
		case "PLAIN":
			fmt.Fprintf(&b, "listener.name.%s.sasl.enabled.mechanisms=PLAIN\n", n)
			fmt.Fprintf(&b, "listener.name.%s.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required", n)
			for _, name := range slices.Sorted(maps.Keys(l.sec.Users)) {
				fmt.Fprintf(&b, ` user_%s="%s"`, name, quote(l.sec.Users[name]))
			}
			b.WriteString(";\n")
		case "SCRAM-SHA-512":
			fmt.Fprintf(&b, "listener.name.%s.sasl.enabled.mechanisms=SCRAM-SHA-512\n", n)
			fmt.Fprintf(&b, "listener.name.%s.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;\n", n)
		}
	}
	return b.String()
}

// protocol is the listener's security protocol.
func (s SecurityConfig) protocol() string {
	switch {
	case s.TLS && s.SASL != "":
		return "SASL_SSL"
	case s.TLS:
		return "SSL"
	case s.SASL != "":
		return "SASL_PLAINTEXT"
	}
	return "PLAINTEXT"
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
		err := brokerReady(ctx, k.adminOpts()...)
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

// adminOpts are the client options of start's check and of Admin: the
// inter-broker listener of a secured broker (plaintext, opened with the
// client listener), as the super user with an Authorizer; else Addr.
func (k *KafkaBroker) adminOpts() []kgo.Opt {
	if k.sec == nil {
		return []kgo.Opt{kgo.SeedBrokers(k.Addr())}
	}
	opts := []kgo.Opt{kgo.SeedBrokers("127.0.0.1:" + strconv.Itoa(k.iport))}
	if k.sec.Authorizer {
		opts = append(opts, kgo.SASL(plain.Auth{User: AdminUser, Pass: k.adminPass}.AsMechanism()))
	}
	return opts
}

// Admin returns an admin client of the broker that bypasses its client
// listener's security: on a broker with an Authorizer it is the super user,
// which creates and deletes ACLs (kadm.ACLBuilder). It is closed when the
// test ends.
func (k *KafkaBroker) Admin() *kadm.Client {
	k.t.Helper()
	cl, err := kgo.NewClient(k.adminOpts()...)
	if err != nil {
		k.t.Fatalf("creating admin client of the kafka broker: %v", err)
	}
	k.t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// brokerReady does Metadata and a CreateTopics/DeleteTopics round trip.
func brokerReady(ctx context.Context, opts ...kgo.Opt) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(1))...)
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

// ACL is one allow rule for Grant, shaped as sink.ACL so that a test can
// convert one into the other: Operation (kafka-acls.sh's name: Read, Write,
// Create, Describe, DescribeConfigs, IdempotentWrite, ...) on the resource
// of type Resource ("topic", "transactional-id", "group" or "cluster")
// named Name, a name prefix when Prefixed.
type ACL struct {
	Resource  string
	Name      string
	Prefixed  bool
	Operation string
}

// Grant creates the ACLs allowing principal (e.g. "User:bridge") acls from
// any host, as the super user of a broker with SecurityConfig.Authorizer,
// and waits until the broker lists them (its authorizer applies them from
// the metadata log a moment after they are created).
func (k *KafkaBroker) Grant(principal string, acls ...ACL) {
	k.t.Helper()
	adm := k.Admin()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	count := func() (int, error) {
		b := kadm.NewACLs().Allow(principal).AllowHosts().AnyResource().ResourcePatternType(kadm.ACLPatternAny).Operations(kadm.OpAny)
		res, err := adm.DescribeACLs(ctx, b)
		n := 0
		for _, r := range res {
			if err == nil {
				err = r.Err
			}
			n += len(r.Described)
		}
		return n, err
	}
	before, err := count()
	if err != nil {
		k.t.Fatalf("describing the ACLs of %s: %v", principal, err)
	}
	for _, a := range acls {
		op, err := kmsg.ParseACLOperation(a.Operation)
		if err != nil {
			k.t.Fatalf("granting %+v: %v", a, err)
		}
		b := kadm.NewACLs().Allow(principal).AllowHosts("*").Operations(op)
		if a.Prefixed {
			b = b.ResourcePatternType(kadm.ACLPatternPrefixed)
		}
		switch a.Resource {
		case "topic":
			b = b.Topics(a.Name)
		case "transactional-id":
			b = b.TransactionalIDs(a.Name)
		case "group":
			b = b.Groups(a.Name)
		case "cluster":
			b = b.Clusters()
		default:
			k.t.Fatalf("granting %+v: unknown resource type %q", a, a.Resource)
		}
		res, err := adm.CreateACLs(ctx, b)
		for _, r := range res {
			if err == nil {
				err = r.Err
			}
		}
		if err != nil {
			k.t.Fatalf("granting %+v to %s: %v", a, principal, err)
		}
	}
	for {
		n, err := count()
		if err == nil && n >= before+len(acls) {
			return
		}
		select {
		case <-ctx.Done():
			k.t.Fatalf("waiting for the ACLs of %s: %d of %d listed (%v)", principal, n, before+len(acls), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
