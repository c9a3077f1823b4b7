package sink

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrNotAuthorized is wrapped by every *AuthorizationError: the brokers
// refused a request because the bridge's principal lacks an ACL. It is
// permanent: retrying sends the same request as the same principal.
var ErrNotAuthorized = errors.New("kafka ACL missing")

// Kafka resource types as kafka-acls.sh names them (--topic,
// --transactional-id, --group, --cluster).
const (
	ResourceTopic           = "topic"
	ResourceTransactionalID = "transactional-id"
	ResourceGroup           = "group"
	ResourceCluster         = "cluster"
)

// Kafka ACL operations the bridge needs, as kafka-acls.sh names them.
const (
	OpRead            = "Read"
	OpWrite           = "Write"
	OpCreate          = "Create"
	OpDescribe        = "Describe"
	OpDescribeConfigs = "DescribeConfigs"
	OpIdempotentWrite = "IdempotentWrite"
	OpAlter           = "Alter"
)

// ACL is one allow rule for the bridge's principal: Operation on the
// resource of type Resource named Name (a name prefix when Prefixed; the
// cluster has the name "kafka-cluster").
type ACL struct {
	Resource  string
	Name      string
	Prefixed  bool
	Operation string
}

// String describes the rule: `Write on topic "amp.s"`.
func (a ACL) String() string {
	if a.Resource == ResourceCluster {
		return a.Operation + " on the cluster"
	}
	if a.Prefixed {
		return fmt.Sprintf("%s on %ss prefixed %q", a.Operation, a.Resource, a.Name)
	}
	return fmt.Sprintf("%s on %s %q", a.Operation, a.Resource, a.Name)
}

// Command returns the kafka-acls.sh command that grants a to principal on
// the brokers of bootstrap ("" prints <bootstrap>).
func (a ACL) Command(bootstrap, principal string) string {
	return ACLCommand(bootstrap, principal, []string{a.Operation}, a.Resource, a.Prefixed, a.Name)
}

// ACLCommand returns one kafka-acls.sh command granting principal each of
// ops on resources of one type (names; none for the cluster), as prefixes
// when prefixed. A secured cluster also needs --command-config with an
// admin's client properties; the command says so.
func ACLCommand(bootstrap, principal string, ops []string, resource string, prefixed bool, names ...string) string {
	if bootstrap == "" {
		bootstrap = "<bootstrap>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kafka-acls.sh --bootstrap-server %s --command-config admin.properties --add --allow-principal %s", bootstrap, principal)
	for _, op := range ops {
		b.WriteString(" --operation " + op)
	}
	if resource == ResourceCluster {
		b.WriteString(" --cluster")
	}
	for _, n := range names {
		fmt.Fprintf(&b, " --%s %s", resource, n)
	}
	if prefixed {
		b.WriteString(" --resource-pattern-type prefixed")
	}
	return b.String()
}

// ACLCommands returns the kafka-acls.sh commands that grant acls to
// principal, as few as the tool allows: one per resource type and pattern
// type whose names need the same operations (the order of acls kept).
func ACLCommands(bootstrap, principal string, acls []ACL) []string {
	type key struct {
		resource string
		prefixed bool
	}
	var keys []key
	ops := map[key]map[string][]string{} // key -> name -> operations
	var names = map[key][]string{}
	for _, a := range acls {
		k := key{a.Resource, a.Prefixed}
		if ops[k] == nil {
			keys = append(keys, k)
			ops[k] = map[string][]string{}
		}
		if _, ok := ops[k][a.Name]; !ok {
			names[k] = append(names[k], a.Name)
		}
		ops[k][a.Name] = append(ops[k][a.Name], a.Operation)
	}
	var out []string
	for _, k := range keys {
		// Names with the same operations share a command.
		var groups [][]string
		for _, n := range names[k] {
			placed := false
			for i, g := range groups {
				if slices.Equal(ops[k][g[0]], ops[k][n]) {
					groups[i] = append(g, n)
					placed = true
					break
				}
			}
			if !placed {
				groups = append(groups, []string{n})
			}
		}
		for _, g := range groups {
			ns := g
			if k.resource == ResourceCluster {
				ns = nil
			}
			out = append(out, ACLCommand(bootstrap, principal, ops[k][g[0]], k.resource, k.prefixed, ns...))
		}
	}
	return out
}

// TopicOps are the operations the bridge's principal needs on its data
// and control topics: Write (producing), Read (reading back retracted
// batches and the control topic, describing producers of open
// transactions), DescribeConfigs (checking cleanup.policy and retention),
// and Create when the bridge creates them (createTopics). Describe needs no
// ACL of its own: Kafka implies it from Read and Write.
func TopicOps(createTopics bool) []string {
	ops := []string{OpWrite, OpRead, OpDescribeConfigs}
	if createTopics {
		ops = append(ops, OpCreate)
	}
	return ops
}

// RequiredACLs returns the least-privileged ACLs of cfg's principal that
// the bridge needs for topics (literal names) and, with exactly-once
// delivery, Write on the transactional ids prefixed "{prefix}." (the
// stream's own and its backfill workers'; Describe, for the check of
// transactions left open, is implied). It needs no consumer group (it
// reads by offset, without a group) and nothing on the cluster: Kafka 4
// lets a producer with Write on a topic (or on its transactional id) be
// idempotent without IdempotentWrite (KIP-679). Cluster mode adds
// ClusterACLs.
func RequiredACLs(cfg Config, createTopics bool, topics ...string) []ACL {
	var out []ACL
	for _, t := range topics {
		for _, op := range TopicOps(createTopics) {
			out = append(out, ACL{Resource: ResourceTopic, Name: t, Operation: op})
		}
	}
	if cfg.Delivery != DeliveryAtLeastOnce {
		out = append(out, ACL{Resource: ResourceTransactionalID, Name: cfg.TransactionalIDPrefix + ".", Prefixed: true, Operation: OpWrite})
	}
	return out
}

// ClusterACLs returns the ACLs a cluster member (group.go) needs beside
// RequiredACLs: Read on its group (joining, heartbeats, leaving; it implies
// the Describe that finding the coordinator and bridge status's
// DescribeGroups take), and on the coordination topic Read (bridge status
// reads the members' claims back; a member itself needs only the Describe
// that Write implies), Write (recording this member's claims; without it
// Group.Run ends on the named error) and, when the bridge creates it
// (createTopic), Create and Alter (growing it by a partition for each
// stream added). Describe on the topic (its metadata, the group's offsets
// of it) is implied by Read and Write.
func ClusterACLs(gc GroupConfig, createTopic bool) []ACL {
	out := []ACL{{Resource: ResourceGroup, Name: gc.Group, Operation: OpRead}}
	ops := []string{OpRead, OpWrite}
	if createTopic {
		ops = append(ops, OpCreate, OpAlter)
	}
	for _, op := range ops {
		out = append(out, ACL{Resource: ResourceTopic, Name: gc.Topic, Operation: op})
	}
	return out
}

// Principal returns the principal the brokers see for cfg with Kafka's
// default principal builder, as kafka-acls.sh takes it: User:<username>
// with SASL; User:<the client certificate's subject> (e.g. User:CN=bridge)
// with a client certificate and no SASL, unless the brokers'
// ssl.principal.mapping.rules map it to another name; User:ANONYMOUS with
// neither (every such client shares it).
func (c Config) Principal() string {
	if c.SASL.Mechanism != "" {
		return "User:" + c.SASL.Username
	}
	if c.TLS.Enabled && c.TLS.CertFile != "" {
		if subject, err := certSubject(c.TLS.CertFile); err == nil {
			return "User:" + subject
		}
	}
	return "User:ANONYMOUS"
}

// certSubject returns the subject of the first certificate in a PEM file,
// in RFC 2253 form as Java prints an X500Principal.
func certSubject(path string) (string, error) {
	cert, err := firstCert(path)
	if err != nil {
		return "", err
	}
	return cert.Subject.String(), nil
}

func firstCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%s: no PEM certificate", path)
		}
		if blk.Type == "CERTIFICATE" {
			return x509.ParseCertificate(blk.Bytes)
		}
	}
}

// AuthorizationError says which ACL the bridge's principal lacks for what
// it was doing, and gives the command that grants it. It wraps
// ErrNotAuthorized and the broker's error.
type AuthorizationError struct {
	// Doing is what was refused ("producing to topic \"x\"").
	Doing string
	// Principal is the bridge's principal (Config.Principal).
	Principal string
	// Missing is the ACL that is missing (one of them, when Alternatives).
	Missing ACL
	// Alternatives are ACLs any one of which would also allow the request
	// (e.g. Read or Write for a topic's metadata, which imply Describe).
	Alternatives []ACL
	// Bootstrap is the broker list for the command.
	Bootstrap string
	// Err is the broker's error (kerr.TopicAuthorizationFailed, ...).
	Err error
}

// Error names the request, the principal, the missing ACL and the
// kafka-acls.sh command that grants it.
func (e *AuthorizationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v: principal %s has no ACL for %s", e.Doing, ErrNotAuthorized, e.Principal, e.Missing)
	for _, a := range e.Alternatives {
		fmt.Fprintf(&b, " (or %s)", a)
	}
	fmt.Fprintf(&b, "; grant it with `%s`", e.Missing.Command(e.Bootstrap, e.Principal))
	b.WriteString(" (the README's Security and Cluster mode sections list every ACL the bridge needs)")
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap returns ErrNotAuthorized and the broker's error.
func (e *AuthorizationError) Unwrap() []error { return []error{ErrNotAuthorized, e.Err} }

// isAuthorization reports whether err is a broker's refusal for a missing
// ACL of any resource type.
func isAuthorization(err error) bool {
	return err != nil && (errors.Is(err, kerr.TopicAuthorizationFailed) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) ||
		errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.GroupAuthorizationFailed))
}

// authError returns err as an *AuthorizationError when it is a broker's
// refusal for a missing ACL (already one: as it is), else err unchanged.
// doing says what was refused; topicOp is the operation a topic refusal
// is about (OpWrite when producing, OpRead when fetching, "" for
// metadata: Read or Write), and topics the topics the request named (the
// first is named when the error does not say). A refused transactional id
// is the producer's txnID; a refused cluster means the idempotent producer
// lacks Write on its topics (or IdempotentWrite on the cluster).
func (c Config) authError(err error, doing, topicOp, txnID string, topics ...string) error {
	if !isAuthorization(err) {
		return err
	}
	var ae *AuthorizationError
	if errors.As(err, &ae) {
		return err
	}
	e := &AuthorizationError{Doing: doing, Principal: c.Principal(), Bootstrap: strings.Join(c.Brokers, ","), Err: err}
	topic := "<topic>"
	if len(topics) > 0 {
		topic = topics[0]
	}
	switch {
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		e.Missing = ACL{Resource: ResourceTransactionalID, Name: c.TransactionalIDPrefix + ".", Prefixed: true, Operation: OpWrite}
		if txnID != "" {
			e.Doing += fmt.Sprintf(" (transactional id %q)", txnID)
		}
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		switch topicOp {
		case "":
			e.Missing = ACL{Resource: ResourceTopic, Name: topic, Operation: OpWrite}
			e.Alternatives = []ACL{{Resource: ResourceTopic, Name: topic, Operation: OpRead}}
		default:
			e.Missing = ACL{Resource: ResourceTopic, Name: topic, Operation: topicOp}
		}
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		// The idempotent producer's InitProducerID: Write on any topic
		// allows it (KIP-679), as does IdempotentWrite on the cluster.
		e.Missing = ACL{Resource: ResourceTopic, Name: topic, Operation: OpWrite}
		e.Alternatives = []ACL{{Resource: ResourceCluster, Name: "kafka-cluster", Operation: OpIdempotentWrite}}
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		e.Missing = ACL{Resource: ResourceGroup, Name: "<group>", Operation: OpRead}
	}
	return e
}
