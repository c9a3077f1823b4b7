package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// secureUser and securePassword are the SASL user the secured scenarios
// run as.
const secureUser, securePassword = "bridge", "s3cret-Pw"

// secureMode is one way the bridge authenticates to the secured broker:
// the listener it connects to (WithListener's name, "" for the broker's
// TLS-only CLIENT listener), a client certificate, a SASL mechanism.
type secureMode struct {
	name       string
	listener   string
	clientCert bool
	mechanism  sink.SASLMechanism
}

// secureModes are the four the issue asks for, all with ACLs on.
var secureModes = []secureMode{
	{name: "tls"},
	{name: "mtls", listener: "MTLS", clientCert: true},
	{name: "scram-sha-512", listener: "SCRAM", mechanism: sink.SASLScramSHA512},
	{name: "plain", listener: "PLAIN", mechanism: sink.SASLPlain},
}

// secureBase is a private real redis-server and an srfake registry: the
// secured scenarios' subject is the broker, and they do not share a stack.
func secureBase(t testing.TB) services {
	t.Helper()
	srv := testenv.StartRedisServer(t)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	return services{name: "secure", redis: srv.Addr(), registry: reg.URL()}
}

// startSecureBroker starts one real broker with KRaft's StandardAuthorizer
// (no ACL: nothing allowed) and a client listener of each secureMode:
// TLS, mutual TLS, SCRAM-SHA-512 over TLS and PLAIN over TLS, with users
// (SCRAM and PLAIN alike).
func startSecureBroker(t testing.TB, users map[string]string) *testenv.KafkaBroker {
	t.Helper()
	return testenv.StartKafkaBroker(t,
		testenv.WithSecurity(testenv.SecurityConfig{TLS: true, Authorizer: true}),
		testenv.WithListener("MTLS", testenv.SecurityConfig{TLS: true, ClientAuth: true}),
		testenv.WithListener("SCRAM", testenv.SecurityConfig{TLS: true, SASL: "SCRAM-SHA-512", Users: users}),
		testenv.WithListener("PLAIN", testenv.SecurityConfig{TLS: true, SASL: "PLAIN", Users: users}))
}

// services points base's Kafka at m's listener of k, as user (SASL modes),
// and grants each harness's principal exactly sink.RequiredACLs for its
// data and control topics and its transactional ids (their prefix is made
// the stream's own, so that harnesses sharing a principal stay apart),
// minus the ACLs drop says to leave out.
func (m secureMode) services(k *testenv.KafkaBroker, base services, user string, drop func(sink.ACL) bool) services {
	svc := base
	svc.name = "secure-" + m.name
	addr := k.Addr()
	if m.listener != "" {
		addr = k.ListenerAddr(m.listener)
	}
	svc.brokers = []string{addr}
	svc.kafkaTLS = k.ClientTLS(m.clientCert)
	if m.mechanism != "" {
		svc.sasl = config.SASLConfig{Mechanism: m.mechanism, Username: user, Password: config.Secret(securePassword)}
	}
	svc.prepare = func(t testing.TB, cfg *config.Config) {
		cfg.Kafka.TransactionalIDPrefix = cfg.Streams[0].ID
		scfg := cfg.Sink()
		var grant []testenv.ACL
		for _, a := range sink.RequiredACLs(scfg, true, cfg.Streams[0].Topic, cfg.Kafka.ControlTopic) {
			if drop == nil || !drop(a) {
				grant = append(grant, testenv.ACL(a))
			}
		}
		k.Grant(scfg.Principal(), grant...)
	}
	return svc
}

// TestIntegrationSecureKafka runs secureScenarios and kafkaACLs against
// one real broker with the StandardAuthorizer and a listener of each
// secureMode (one broker for both: each JVM costs seconds of make test).
func TestIntegrationSecureKafka(t *testing.T) {
	users := map[string]string{secureUser: securePassword, "alo": securePassword, "alo-nowrite": securePassword}
	for i := range requiredACLs(t) {
		users[fmt.Sprintf("acl%d", i)] = securePassword
	}
	for _, u := range clusterUsers() {
		users[u] = securePassword
	}
	k := startSecureBroker(t, users) // first: it skips (or fails) without BRIDGE_TEST_KAFKA_HOME
	base := secureBase(t)
	t.Run("scenarios", func(t *testing.T) {
		t.Parallel()
		secureScenarios(t, k, base)
	})
	t.Run("acls", func(t *testing.T) {
		t.Parallel()
		kafkaACLs(t, k, base)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		clusterSecure(t, k, base)
	})
}

// requiredACLs are the ACLs sink.RequiredACLs lists for a harness's names.
func requiredACLs(t testing.TB) []sink.ACL {
	probe := newHarnessConfig(t)
	return sink.RequiredACLs(probe.Sink(), true, probe.Streams[0].Topic, probe.Kafka.ControlTopic)
}

// secureScenarios runs the run-loop scenarios (the happy
// path; a reorg while the bridge is down, so a restart that resumes from
// the cursor and retracts; a restart with a lost checkpoint rebuilt from
// the control topic, then a reorg read back from Kafka) over each of TLS,
// mutual TLS, SCRAM-SHA-512 over TLS and PLAIN over TLS against one real
// broker with the StandardAuthorizer, the bridge's principal holding only
// the ACLs sink.RequiredACLs lists. Each is checked by bridge verify.
// Redis is a private redis-server, the registry srfake.
func secureScenarios(t *testing.T, k *testenv.KafkaBroker, base services) {
	for _, m := range secureModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			svc := m.services(k, base, secureUser, nil)
			t.Run("happy-path", func(t *testing.T) { scenarioHappyPath(t, svc) })
			t.Run("reorg-while-down", func(t *testing.T) { scenarioReorgWhileDown(t, svc) })
			t.Run("lost-checkpoint", func(t *testing.T) { scenarioLostCheckpoint(t, svc) })
		})
	}
	// bridge run waits at start for a broker that refuses connections, but
	// not for one that refuses the password: that is a permanent error
	// returned at once, long before startup_timeout.
	t.Run("wrong-password-at-start", func(t *testing.T) {
		t.Parallel()
		svc := secureModes[2].services(k, base, secureUser, nil)
		svc.sasl.Password = "not-the-password"
		svc.prepare = nil
		h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 4}}, 128)
		cfg := *h.cfg
		cfg.StartupTimeout = 20 * time.Second
		b := newBridgeShell(&cfg, testLogger())
		b.wait = true
		start := time.Now()
		err := b.connect(t.Context(), needAll)
		b.close()
		require.ErrorIs(t, err, sink.ErrAuthentication)
		assert.True(t, pipeline.Permanent(err))
		assert.Less(t, time.Since(start), 10*time.Second, "no waiting for startup_timeout")
		assert.ErrorContains(t, err, "kafka.sasl.password_file or BRIDGE_KAFKA_SASL_PASSWORD")
		assert.NotContains(t, err.Error(), "not-the-password")
	})
}

// kafkaACLs proves sink.RequiredACLs minimal on the real
// broker: with each of its ACLs removed in turn (a principal of its own,
// SCRAM-SHA-512 over TLS), `bridge run` stops on a permanent
// *sink.AuthorizationError that names the principal, the missing ACL and
// the kafka-acls.sh command that grants it (and never blames another
// instance); a reorg is forced, so that the read-back of retracted batches
// needs its ACLs too. The same run without a transactional-id prefix of
// its own: at-least-once delivery needs no transactional-id ACL and no
// cluster ACL, and without Write on its topics the idempotent producer's
// ClusterAuthorizationFailed names the topic Write it lacks.
func kafkaACLs(t *testing.T, k *testenv.KafkaBroker, base services) {
	scram := secureModes[2]
	all := requiredACLs(t)
	for i, missing := range all {
		// The ACLs of another harness name its own topics: drop by kind.
		same := func(a sink.ACL) bool {
			return a.Resource == missing.Resource && a.Operation == missing.Operation && kindOf(a.Name) == kindOf(missing.Name)
		}
		t.Run(fmt.Sprintf("without-%s-%s-%s", missing.Operation, missing.Resource, kindOf(missing.Name)), func(t *testing.T) {
			t.Parallel()
			svc := scram.services(k, base, fmt.Sprintf("acl%d", i), same)
			h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 8}, MaxMicrobatchBlocks: 3}, 128)
			want := missing
			switch kindOf(missing.Name) {
			case "data":
				want.Name = h.cfg.Streams[0].Topic
			case "control":
				want.Name = h.cfg.Kafka.ControlTopic
			case "txn":
				want.Name = h.cfg.Kafka.TransactionalIDPrefix + "."
			}
			err := h.runUntilFailure(t)
			t.Logf("without %s: %v", missing, err)
			require.ErrorIs(t, err, sink.ErrNotAuthorized, "without %s", want)
			assert.True(t, pipeline.Permanent(err), "a missing ACL is permanent: %v", err)
			assert.NotErrorIs(t, err, sink.ErrFenced)
			assert.NotContains(t, err.Error(), "another instance")
			principal := "User:" + svc.sasl.Username
			assert.Contains(t, err.Error(), "principal "+principal+" has no ACL for "+want.String())
			assert.Contains(t, err.Error(), "`"+want.Command(svc.brokers[0], principal)+"`")
		})
	}
	t.Run("at-least-once", func(t *testing.T) {
		// Without transactions the bridge needs no transactional-id ACL,
		// and no IdempotentWrite: Write on its topics makes it idempotent.
		t.Parallel()
		svc := scram.services(k, base, "alo", nil)
		prepare := svc.prepare
		svc.prepare = func(t testing.TB, cfg *config.Config) {
			cfg.Kafka.Delivery = config.AtLeastOnce
			prepare(t, cfg)
		}
		h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 12}, MaxMicrobatchBlocks: 4}, 128)
		for _, a := range sink.RequiredACLs(h.cfg.Sink(), true, "t") {
			require.Equal(t, sink.ResourceTopic, a.Resource, "granted only topic ACLs: %s", a)
		}
		stop := h.run()
		h.waitHead()
		require.NoError(t, stop())
		requireClean(t, h.verify())
	})
	t.Run("at-least-once-without-write", func(t *testing.T) {
		t.Parallel()
		svc := scram.services(k, base, "alo-nowrite", func(a sink.ACL) bool { return a.Operation == sink.OpWrite })
		prepare := svc.prepare
		svc.prepare = func(t testing.TB, cfg *config.Config) {
			cfg.Kafka.Delivery = config.AtLeastOnce
			prepare(t, cfg)
		}
		h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 8}, MaxMicrobatchBlocks: 3}, 128)
		err := h.runUntilFailure(t)
		t.Logf("at-least-once without Write: %v", err)
		require.ErrorIs(t, err, sink.ErrNotAuthorized)
		assert.True(t, pipeline.Permanent(err))
		assert.Contains(t, err.Error(), "principal User:alo-nowrite has no ACL for Write on topic")
		assert.Contains(t, err.Error(), "(or IdempotentWrite on the cluster)")
	})
}

// kindOf says which of a harness's resources name is: "data" (its data
// topic), "control" or "txn" (its transactional-id prefix); every harness
// names them with the same suffixes.
func kindOf(name string) string {
	switch {
	case strings.HasSuffix(name, ".txs"):
		return "data"
	case strings.HasSuffix(name, ".control"):
		return "control"
	default:
		return "txn"
	}
}

// newHarnessConfig is the configuration newHarness makes, without a
// simulator, for the names of its resources.
func newHarnessConfig(t testing.TB) *config.Config {
	t.Helper()
	id := "probe"
	cfg := &config.Config{
		Amp:        config.AmpConfig{Addr: "127.0.0.1:1"},
		Kafka:      config.KafkaConfig{Brokers: []string{"127.0.0.1:1"}, ReplicationFactor: 1, ControlTopic: id + ".control", TransactionalIDPrefix: id},
		Checkpoint: config.CheckpointConfig{Store: "redis", Redis: config.RedisConfig{Addr: "127.0.0.1:1", KeyPrefix: id}},
		Streams:    []config.StreamConfig{{ID: id, SQL: "SELECT * FROM eth_rpc.transactions SETTINGS stream = true", Topic: id + ".txs"}},
	}
	cfg.Defaults()
	require.NoError(t, cfg.Validate())
	return cfg
}

// runUntilFailure runs the bridge until it stops by itself and returns
// its error. Once it has committed the head, a reorg makes it read back
// what it committed; a run that handles that too without stopping fails
// the test: the ACL it lacks was not needed.
func (h *harness) runUntilFailure(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b, err := newBridge(ctx, h.cfg, log)
	if err != nil {
		return err
	}
	defer b.close()
	var mu sync.Mutex
	var last uint64
	b.events = func(e pipeline.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Kind == "commit" {
			for _, r := range e.Ranges {
				last = r.End
			}
		}
	}
	done := make(chan error, 1)
	go func() { done <- b.run(ctx) }()
	head, _ := h.sim.Head()
	reorgAt := time.Time{}
	for {
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Millisecond):
		}
		mu.Lock()
		l := last
		mu.Unlock()
		switch {
		case reorgAt.IsZero() && l >= head:
			require.NoError(t, h.sim.Reorg(2, 3))
			head, _ = h.sim.Head()
			reorgAt = time.Now()
		case !reorgAt.IsZero() && l >= head && time.Since(reorgAt) > 2*time.Second:
			cancel()
			err := <-done
			t.Fatalf("the bridge published and retracted without the ACL: it is not needed (run: %v); log:\n%s", err, logs.String())
		}
	}
}
