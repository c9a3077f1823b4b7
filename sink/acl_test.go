package sink

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestACLsDocumented pins the least-privileged ACLs (RequiredACLs, proved
// minimal on the real broker by cmd/bridge's TestIntegrationSecureKafka, and
// ClusterACLs, by TestIntegrationClusterACLs): the README's Security and
// Cluster mode sections carry them as kafka-acls.sh commands for the
// default names; a change must change it too.
func TestACLsDocumented(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Brokers = []string{"kafka-1:9093"}
	cfg.SASL = SASLConfig{Mechanism: SASLScramSHA512, Username: "bridge", Password: "x"}
	acls := RequiredACLs(cfg, true, "amp.mainnet_txs", "amp-kafka-bridge.control")
	cmds := ACLCommands("kafka-1:9093", cfg.Principal(), acls)
	assert.Equal(t, []string{
		"kafka-acls.sh --bootstrap-server kafka-1:9093 --command-config admin.properties --add --allow-principal User:bridge " +
			"--operation Write --operation Read --operation DescribeConfigs --operation Create --topic amp.mainnet_txs --topic amp-kafka-bridge.control",
		"kafka-acls.sh --bootstrap-server kafka-1:9093 --command-config admin.properties --add --allow-principal User:bridge " +
			"--operation Write --transactional-id amp-kafka-bridge. --resource-pattern-type prefixed",
	}, cmds)
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	for _, c := range cmds {
		if !strings.Contains(string(readme), "\n"+c+"\n") { // not assert.Contains: it would print the whole README
			t.Errorf("the README's Security section lacks the line\n%s", c)
		}
	}

	// Cluster mode's, for the default group and coordination topic
	// (proved enough and the least by TestIntegrationClusterACLs).
	gc := GroupConfig{Group: cfg.TransactionalIDPrefix + ".cluster", Topic: "amp-kafka-bridge.cluster"}
	ccmds := ACLCommands("kafka-1:9093", cfg.Principal(), ClusterACLs(gc, true))
	assert.Equal(t, []string{
		"kafka-acls.sh --bootstrap-server kafka-1:9093 --command-config admin.properties --add --allow-principal User:bridge " +
			"--operation Read --group amp-kafka-bridge.cluster",
		"kafka-acls.sh --bootstrap-server kafka-1:9093 --command-config admin.properties --add --allow-principal User:bridge " +
			"--operation Read --operation Write --operation Create --operation Alter --topic amp-kafka-bridge.cluster",
	}, ccmds)
	for _, c := range ccmds {
		if !strings.Contains(string(readme), "\n"+c+"\n") {
			t.Errorf("the README's Cluster mode section lacks the line\n%s", c)
		}
	}
	for _, a := range ClusterACLs(gc, false) {
		assert.NotContains(t, []string{OpCreate, OpAlter}, a.Operation, "a coordination topic created beforehand needs no Create or Alter: %s", a)
	}

	cfg.Delivery = DeliveryAtLeastOnce
	for _, a := range RequiredACLs(cfg, false, "t") {
		assert.Equal(t, ResourceTopic, a.Resource, "at-least-once needs no transactional-id ACL: %s", a)
		assert.NotEqual(t, OpCreate, a.Operation, "pre-created topics need no Create: %s", a)
	}
}

// TestPrincipal: the principal is the SASL user, else the client
// certificate's subject, else ANONYMOUS, as Kafka's default principal
// builder sees them.
func TestPrincipal(t *testing.T) {
	cfg := DefaultConfig()
	assert.Equal(t, "User:ANONYMOUS", cfg.Principal())
	dir := t.TempDir()
	ca, caKey := newCA(t)
	leaf := newLeaf(t, ca, caKey, "bridge-prod", true)
	cfg.TLS = TLSConfig{Enabled: true, CertFile: writePEM(t, dir, "c.pem", "CERTIFICATE", leaf.Certificate[0])}
	assert.Equal(t, "User:CN=bridge-prod", cfg.Principal())
	cfg.SASL = SASLConfig{Mechanism: SASLPlain, Username: "svc-bridge", Password: "x"}
	assert.Equal(t, "User:svc-bridge", cfg.Principal(), "SASL wins over the certificate")
}

// TestAuthorizationErrorNamesTheACL: each broker refusal names the ACL,
// the principal and the command, and is never fencing.
func TestAuthorizationErrorNamesTheACL(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Brokers = []string{"k:9093"}
	cfg.SASL = SASLConfig{Mechanism: SASLPlain, Username: "bridge", Password: "x"}
	for _, tc := range []struct {
		name string
		err  error
		op   string
		want string
	}{
		{"topic write", kerr.TopicAuthorizationFailed, OpWrite,
			`principal User:bridge has no ACL for Write on topic "t"; grant it with ` +
				"`kafka-acls.sh --bootstrap-server k:9093 --command-config admin.properties --add --allow-principal User:bridge --operation Write --topic t`"},
		{"topic metadata", kerr.TopicAuthorizationFailed, "", `has no ACL for Write on topic "t" (or Read on topic "t")`},
		{"transactional id", kerr.TransactionalIDAuthorizationFailed, OpWrite,
			`has no ACL for Write on transactional-ids prefixed "amp-kafka-bridge."; grant it with ` +
				"`kafka-acls.sh --bootstrap-server k:9093 --command-config admin.properties --add --allow-principal User:bridge --operation Write " +
				"--transactional-id amp-kafka-bridge. --resource-pattern-type prefixed`"},
		{"cluster", kerr.ClusterAuthorizationFailed, OpWrite, `has no ACL for Write on topic "t" (or IdempotentWrite on the cluster)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cfg.authError(tc.err, "doing", tc.op, "amp-kafka-bridge.s", "t")
			require.ErrorIs(t, err, ErrNotAuthorized)
			require.ErrorIs(t, err, tc.err)
			assert.NotErrorIs(t, err, ErrFenced)
			assert.Contains(t, err.Error(), tc.want)
			assert.False(t, isFenced(err))
		})
	}
	plain := kerr.UnknownTopicOrPartition
	assert.Same(t, error(plain), cfg.authError(plain, "doing", OpWrite, "", "t"), "other errors pass through")
	assert.True(t, strings.HasPrefix(cfg.authError(kerr.TopicAuthorizationFailed, "producing", OpWrite, "", "t").Error(), "producing: kafka ACL missing"))
}
