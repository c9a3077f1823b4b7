package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// writePKI writes a throwaway CA, a server certificate for 127.0.0.1 and
// localhost and a client certificate (CN=bridge), valid for a day, into dir
// (testenv's test PKI) and prints the file names.
func writePKI(out io.Writer, dir string) error {
	f, err := testenv.WriteTestPKI(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "ca=%s\nserver_cert=%s\nserver_key=%s\nclient_cert=%s\nclient_key=%s\n",
		f.CAFile, f.ServerCertFile, f.ServerKeyFile, f.ClientCertFile, f.ClientKeyFile)
	return nil
}

// adminAuth is a SASL PLAIN user for the secured broker's plaintext
// inter-broker listener (its super user).
type adminAuth struct {
	user, passwordFile string
}

// opts returns the client options that authenticate as a (none without a
// user).
func (a adminAuth) opts() ([]kgo.Opt, error) {
	if a.user == "" {
		return nil, nil
	}
	pw, err := os.ReadFile(a.passwordFile)
	if err != nil {
		return nil, fmt.Errorf("reading the SASL password: %w", err)
	}
	return []kgo.Opt{kgo.SASL(plain.Auth{User: a.user, Pass: strings.TrimSpace(string(pw))}.AsMechanism())}, nil
}

// aclGrant is what grantACLs grants: the bridge's ACLs (sink.TopicOps on
// the topics prefixed topicPrefix, Write on the transactional ids
// prefixed txnPrefix, and for cluster mode Read on the groups prefixed
// txnPrefix: the default cluster.group is "{prefix}.cluster", and the
// coordination topic's ACLs are among the topics') to each principal.
type aclGrant struct {
	principals  []string
	topicPrefix string
	txnPrefix   string
}

// grantACLs creates the bridge's ACLs on brokers as admin and prints each
// as the kafka-acls.sh command that would have created it.
func grantACLs(ctx context.Context, out io.Writer, brokers string, admin adminAuth, g aclGrant) error {
	if len(g.principals) == 0 || g.topicPrefix == "" || g.txnPrefix == "" {
		return errors.New("kafka-acls needs -principal, -topic-prefix and -txn-prefix")
	}
	opts, err := admin.opts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(strings.Split(brokers, ",")...))...)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var acls []sink.ACL
	for _, op := range sink.TopicOps(true) {
		acls = append(acls, sink.ACL{Resource: sink.ResourceTopic, Name: g.topicPrefix, Prefixed: true, Operation: op})
	}
	acls = append(acls, sink.ACL{Resource: sink.ResourceTransactionalID, Name: g.txnPrefix, Prefixed: true, Operation: sink.OpWrite},
		sink.ACL{Resource: sink.ResourceGroup, Name: g.txnPrefix, Prefixed: true, Operation: sink.OpRead})
	for _, p := range g.principals {
		for _, a := range acls {
			op, err := kmsg.ParseACLOperation(a.Operation)
			if err != nil {
				return fmt.Errorf("parsing operation %s: %w", a.Operation, err)
			}
			b := kadm.NewACLs().Allow(p).AllowHosts("*").Operations(op).ResourcePatternType(kadm.ACLPatternPrefixed)
			switch a.Resource {
			case sink.ResourceTopic:
				b = b.Topics(a.Name)
			case sink.ResourceGroup:
				b = b.Groups(a.Name)
			default:
				b = b.TransactionalIDs(a.Name)
			}
			res, err := adm.CreateACLs(ctx, b)
			for _, r := range res {
				if err == nil {
					err = r.Err
				}
			}
			if err != nil {
				return fmt.Errorf("granting %s to %s: %w", a, p, err)
			}
		}
		for _, c := range sink.ACLCommands(brokers, p, acls) {
			fmt.Fprintln(out, c)
		}
	}
	return nil
}
