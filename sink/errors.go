package sink

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/tlsconfig"
)

// Sentinel errors callers branch on with errors.Is. Every error the
// transaction API returns wraps exactly one of ErrFenced, ErrUnknownOutcome,
// ErrAborted or ErrDeliveryFailed, or an *AuthorizationError
// (ErrNotAuthorized: the producer is unusable and nothing was committed),
// or is a context/usage error, so the run loop can map it to one outcome
// (style H10). An aborted transaction whose record a missing ACL failed
// wraps both ErrAborted and ErrNotAuthorized.
var (
	// ErrFenced means another producer with the same transactional id took
	// over (ProducerFenced, InvalidProducerEpoch of a transaction younger
	// than the transaction timeout). The Producer is unusable; the process
	// must stop and exit non-zero: a second bridge instance is running the
	// same stream. A refused transactional id (a missing ACL) is not
	// fencing: it is an *AuthorizationError (ErrNotAuthorized).
	ErrFenced = errors.New("producer fenced: another instance owns this transactional id")

	// ErrUnknownOutcome means EndTransaction(commit) failed in a way that
	// leaves the outcome unknown (transport error, timeout, UNKNOWN_SERVER_ERROR):
	// the transaction may or may not be committed. It is also returned when
	// the producer itself is in a state it cannot leave (an abort that could
	// not be confirmed, a producer id kgo cannot recover). The Producer is
	// unusable; the caller must close it, restart, and re-derive its state
	// from Kafka (the control topic) before producing again.
	ErrUnknownOutcome = errors.New("transaction outcome unknown: restart and reconcile with the control topic")

	// ErrAborted means the transaction was aborted and nothing it produced
	// is visible to read_committed consumers. The Producer stays usable: the
	// caller retries from its last checkpoint.
	ErrAborted = errors.New("transaction aborted")

	// ErrDeliveryFailed is the at-least-once counterpart of ErrAborted: some
	// records of the failed unit may already be visible. The caller replays
	// from its last checkpoint, and consumers see duplicates.
	ErrDeliveryFailed = errors.New("delivery failed (at-least-once: records may be partially visible)")

	// ErrClosed is returned by every call on a closed Producer or Reader.
	ErrClosed = errors.New("sink closed")

	// ErrTopicInvalid is wrapped by every *TopicError.
	ErrTopicInvalid = errors.New("topic invalid")

	// ErrRecordTooLarge means a record is larger than the producer's batch
	// limit (kafka.batch_max_bytes) or the topic's max.message.bytes: no
	// retry can send it.
	ErrRecordTooLarge = errors.New("record too large for kafka")
	// ErrTransactionTimeout: kafka.transaction_timeout is above the
	// broker's transaction.max.timeout.ms, so no transaction can begin
	// (the broker refuses the producer id): lower the one or raise the
	// other.
	ErrTransactionTimeout = errors.New("kafka.transaction_timeout exceeds the broker's transaction.max.timeout.ms")
	// ErrRecordsMissing is wrapped by every *MissingRecordsError.
	ErrRecordsMissing = errors.New("records missing from kafka")

	// ErrHangingTransaction is wrapped by every *HangingTransactionError: a
	// read gave up because a transaction open on a partition held its last
	// stable offset back until the read's deadline.
	ErrHangingTransaction = errors.New("a transaction holds the partition's last stable offset back")

	// ErrDataTopicLost is wrapped by every *DataTopicLostError: a data
	// topic that a stream has committed records to was deleted, recreated
	// or truncated under it, so the records its checkpoint points at are
	// gone. Retrying cannot bring them back.
	ErrDataTopicLost = errors.New("data topic lost")

	// ErrOrphanedTransaction is wrapped, besides ErrHangingTransaction, by
	// every *HangingTransactionError of HangingCheck.Check: at a stream's
	// start, a transaction of the stream's own producers is open on a
	// partition although its coordinator has completed it. It never ends
	// by itself, and producing would let the producer's next marker decide
	// its records' fate, so the stream must not start until an operator
	// has ended it (a permanent error).
	ErrOrphanedTransaction = errors.New("a transaction its coordinator has completed is still open on a partition")
)

// HangingVerdict says whether the transaction that holds a partition's last
// stable offset back will end by itself.
type HangingVerdict int

const (
	// HangingUnknown means the open transaction or its coordinator's state
	// could not be found (see HangingTransactionError.DescribeErr).
	HangingUnknown HangingVerdict = iota
	// HangingOngoing means its coordinator still runs it. It ends when its
	// producer commits or aborts it, or, at the latest, when the
	// coordinator aborts it at its transaction timeout.
	HangingOngoing
	// HangingOrphaned means its coordinator has completed it (or runs another
	// transaction that does not include the partition) although the
	// partition never received its marker. It never ends by itself: an
	// operator must abort it (a Kafka broker bug, see the README).
	HangingOrphaned
)

// HangingTransactionError names the transaction that held a partition's
// last stable offset back until a read gave up, says whether it will end by
// itself, and how an operator ends it. It wraps ErrHangingTransaction and
// the context error that ended the wait. HangingCheck.Check returns it too
// (AtStart), for an orphaned transaction of the stream's own producers
// found when the stream starts; then it wraps ErrOrphanedTransaction
// instead of a context error.
type HangingTransactionError struct {
	Topic     string
	Partition int32
	// AtStart is set by HangingCheck.Check: no read waited (Target,
	// LastStable and Err are unset), and CoordinatorState is the
	// coordinator's decision for the transaction (CompleteCommit or
	// CompleteAbort) when the state it recorded before the stream's
	// producer initialised tells it, else its state now.
	AtStart bool
	// Target is the offset the read waited to become stable; LastStable is
	// the partition's last stable offset when it gave up.
	Target, LastStable int64
	// Bootstrap is the broker list for the operator's command.
	Bootstrap string

	// Found is true when DescribeProducers found the open transaction; the
	// fields below it are set only then.
	Found            bool
	ProducerID       int64
	ProducerEpoch    int16
	StartOffset      int64     // the transaction's first offset on the partition
	LastWrite        time.Time // the producer's last write to the partition
	CoordinatorEpoch int32     // of the producer's last marker on the partition (-1: none)
	OtherOpen        int       // further open transactions on the partition

	// TransactionalID is the producer's transactional id ("" if no
	// coordinator lists the producer id). CoordinatorState is the
	// coordinator's state of it (Ongoing, PrepareCommit, CompleteCommit,
	// ...); TxnStarted and TxnTimeout describe its current transaction.
	TransactionalID  string
	CoordinatorState string
	TxnStarted       time.Time
	TxnTimeout       time.Duration

	Verdict HangingVerdict
	// DescribeErr is why the transaction could not be described fully.
	DescribeErr error
	// Err is the context error that ended the wait.
	Err error
}

// Error names the partition and the transaction, says whether it will end
// by itself, and what to do.
func (e *HangingTransactionError) Error() string {
	var b strings.Builder
	if e.AtStart {
		fmt.Fprintf(&b, "at the stream's start, %s/%d holds an open transaction of the stream's own producer that its coordinator has completed; "+
			"the bridge refuses to produce, because that producer's next marker on the partition would decide the fate of those records instead of "+
			"the coordinator's decision", e.Topic, e.Partition)
	} else {
		fmt.Fprintf(&b, "waiting for %s/%d to become stable up to offset %d: its last stable offset stayed at %d",
			e.Topic, e.Partition, e.Target, e.LastStable)
	}
	if errors.Is(e.DescribeErr, errHangingEnded) {
		fmt.Fprintf(&b, ": the transaction that held it back has ended since; retry: %v", e.Err)
		return b.String()
	}
	if !e.Found {
		b.WriteString(": a transaction is still open on the partition, possibly of a crashed producer that times out after its transaction.timeout.ms")
		if e.DescribeErr != nil {
			fmt.Fprintf(&b, " (describing it failed: %v)", e.DescribeErr)
		}
		fmt.Fprintf(&b, "; `kafka-transactions.sh --bootstrap-server %s describe-producers --topic %s --partition %d` shows it: %v",
			e.Bootstrap, e.Topic, e.Partition, e.Err)
		return b.String()
	}
	if e.AtStart {
		fmt.Fprintf(&b, ": the open transaction of producer id %d epoch %d", e.ProducerID, e.ProducerEpoch)
	} else {
		fmt.Fprintf(&b, ", held back by the open transaction of producer id %d epoch %d", e.ProducerID, e.ProducerEpoch)
	}
	if e.TransactionalID != "" {
		fmt.Fprintf(&b, " (transactional id %q)", e.TransactionalID)
	}
	fmt.Fprintf(&b, " that starts at offset %d", e.StartOffset)
	var notes []string
	if !e.LastWrite.IsZero() {
		notes = append(notes, "the producer's last write to the partition: "+e.LastWrite.UTC().Format(time.RFC3339))
	}
	if e.OtherOpen > 0 {
		notes = append(notes, fmt.Sprintf("%d more open transaction(s) on the partition", e.OtherOpen))
	}
	if len(notes) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(notes, "; "))
	}
	b.WriteString(". ")
	abort := fmt.Sprintf("`kafka-transactions.sh --bootstrap-server %s abort --topic %s --partition %d --start-offset %d` "+
		"(with --command-config <admin client properties> for TLS or SASL)", e.Bootstrap, e.Topic, e.Partition, e.StartOffset)
	switch e.Verdict {
	case HangingOngoing:
		fmt.Fprintf(&b, "Its coordinator still considers it ongoing (state %s", e.CoordinatorState)
		if !e.TxnStarted.IsZero() {
			fmt.Fprintf(&b, ", started %s", e.TxnStarted.UTC().Format(time.RFC3339))
		}
		if e.TxnTimeout > 0 {
			fmt.Fprintf(&b, ", transaction timeout %s", e.TxnTimeout)
		}
		b.WriteString("): it ends when its producer commits or aborts it, or at the latest when the coordinator aborts it at its " +
			"transaction timeout; retry then. If the producer is another bridge instance or application, check it")
	case HangingOrphaned:
		b.WriteString("It will never end by itself: ")
		if e.TransactionalID == "" {
			b.WriteString("no transaction coordinator lists its producer id any more (unless these credentials may not describe its transactional id)")
		} else {
			fmt.Fprintf(&b, "its coordinator has finished with it (state %s) but the partition never received its marker "+
				"(most likely a Kafka broker bug after every replica of the partition was down at once: see the README's known issue)", e.CoordinatorState)
		}
		fmt.Fprintf(&b, ". End it with %s. ", abort)
		switch e.CoordinatorState {
		case "CompleteCommit":
			b.WriteString("WARNING: its coordinator COMMITTED it, and the abort discards its records on this partition: rows (or control " +
				"events) the bridge counted as published. " + afterAbort)
		case "CompleteAbort":
			b.WriteString("Its coordinator aborted it, so the abort loses nothing")
		default:
			b.WriteString("Whether it was committed is unknown: the abort discards its records on this partition. " + afterAbort)
		}
	case HangingUnknown:
		fallthrough
	default:
		b.WriteString("Whether its coordinator still runs it is unknown")
		if e.DescribeErr != nil {
			fmt.Fprintf(&b, " (%v)", e.DescribeErr)
		}
		fmt.Fprintf(&b, ": `kafka-transactions.sh --bootstrap-server %s find-hanging --topic %s --partition %d` tells "+
			"(it lists open transactions older than 15 minutes that no coordinator will end); if it lists this one, end it with %s, then run `bridge verify`",
			e.Bootstrap, e.Topic, e.Partition, abort)
	}
	if e.AtStart {
		b.WriteString("; then start the stream again")
		return b.String()
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

// afterAbort is the recovery after aborting a transaction that may have
// been committed.
const afterAbort = "Abort every partition the transaction left open (the data topic's and the control topic's), then run " +
	"`bridge verify`. If it reports missing rows and the control topic's partition was among those aborted, stop the bridge and run " +
	"`bridge rewind -stream <stream> -to-block <first missing block>`: the control event went with the rows, so the rewind rebuilds the " +
	"checkpoint without them and the next `bridge run` publishes those blocks again. (A rewind reads back the rows it retracts, so it fails with records missing when a discarded row's " +
	"control event survived; only a new stream id publishes those rows again.)"

// Unwrap returns ErrHangingTransaction and the context error, or
// ErrOrphanedTransaction when AtStart.
func (e *HangingTransactionError) Unwrap() []error {
	if e.AtStart {
		return []error{ErrHangingTransaction, ErrOrphanedTransaction}
	}
	return []error{ErrHangingTransaction, e.Err}
}

// TopicError says which topic is misconfigured, what is wrong and how to
// fix it. It wraps ErrTopicInvalid.
type TopicError struct {
	Topic   string
	Problem string
	Fix     string
}

// Error names the topic, the problem and the fix.
func (e *TopicError) Error() string {
	return fmt.Sprintf("topic %q: %s; fix: %s", e.Topic, e.Problem, e.Fix)
}

// Unwrap returns ErrTopicInvalid.
func (e *TopicError) Unwrap() error { return ErrTopicInvalid }

// MissingRecordsError reports offsets of a span that Kafka no longer (or
// never) held. It wraps ErrRecordsMissing.
type MissingRecordsError struct {
	Span Span
	// LogStart is the partition's log start offset when it was read (-1 if
	// unknown); records below it were deleted by retention or DeleteRecords.
	LogStart int64
	// End is the partition's end offset (high watermark) when it was
	// read (-1 if unknown); a span at or past it was never written.
	End int64
	// Missing counts offsets of the span no record was returned for.
	Missing int64
	// Reason is a human explanation.
	Reason string
}

// Error names the span, how many records are missing and why.
func (e *MissingRecordsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "reading back %s: %d of %d records missing (log start %d, end %d): %s",
		e.Span, e.Missing, e.Span.Last-e.Span.First+1, e.LogStart, e.End, e.Reason)
	return b.String()
}

// Unwrap returns ErrRecordsMissing.
func (e *MissingRecordsError) Unwrap() error { return ErrRecordsMissing }

// DataTopicLostError says how a data topic that a stream has committed
// records to lost them: it is missing (deleted), has another topic id than
// the one the stream recorded (recreated), a partition ends below the
// offsets the stream committed, or a read-back found records missing. It
// wraps ErrDataTopicLost and Cause.
type DataTopicLostError struct {
	Topic string
	// Missing is set when the topic does not exist.
	Missing bool
	// RecordedID is the topic id the stream recorded ("" if none); ID is
	// the topic's id now ("" if missing or unknown).
	RecordedID, ID string
	// Partition, End and Committed describe a partition whose end offset
	// (high watermark) End is below Committed, the offset after the last
	// record the stream committed to it; Committed is 0 when no partition
	// fell short.
	Partition      int32
	End, Committed int64
	// Cause is the error that revealed the loss (a *MissingRecordsError of
	// a read-back), or nil.
	Cause error
}

// Error names the topic, what shows the loss and what to do.
func (e *DataTopicLostError) Error() string {
	var b strings.Builder
	var why []string
	switch {
	case e.Missing:
		why = append(why, "it does not exist")
	case e.RecordedID != "" && e.ID != "" && e.ID != e.RecordedID:
		why = append(why, fmt.Sprintf("id %s, now %s", e.RecordedID, e.ID))
	}
	if e.Committed > 0 {
		why = append(why, fmt.Sprintf("partition %d: end offset %d below committed offset %d", e.Partition, e.End, e.Committed))
	}
	if len(why) > 0 {
		fmt.Fprintf(&b, "data topic %s was deleted or recreated (%s)", e.Topic, strings.Join(why, "; "))
	} else {
		fmt.Fprintf(&b, "data topic %s no longer holds records the stream committed", e.Topic)
	}
	if e.Cause != nil {
		fmt.Fprintf(&b, " (%v)", e.Cause)
	}
	b.WriteString(": the records its checkpoint points at are gone, so reorgs cannot be retracted and the topic no longer matches what the " +
		"stream published; restore the topic, or start the stream over under a new stream id")
	return b.String()
}

// Unwrap returns ErrDataTopicLost and Cause.
func (e *DataTopicLostError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrDataTopicLost}
	}
	return []error{ErrDataTopicLost, e.Cause}
}

var (
	// ErrAuthentication means a broker refused the SASL credentials
	// (kafka.sasl). It is permanent: retrying sends the same password.
	ErrAuthentication = errors.New("kafka SASL authentication failed")
	// ErrUntrustedCertificate means the TLS handshake with a broker failed
	// because its certificate is not signed by a trusted CA (the system's or
	// kafka.tls.ca_file's). It is permanent: retrying meets the same
	// certificate.
	ErrUntrustedCertificate = errors.New("kafka broker's TLS certificate is not trusted")
	// ErrSASLMechanism means the broker's listener does not enable the
	// configured SASL mechanism (kafka.sasl.mechanism), or uses no SASL at
	// all. It is permanent.
	ErrSASLMechanism = errors.New("kafka SASL mechanism not enabled on the broker's listener")
	// ErrClientCertificate means a broker that requires mutual TLS refused
	// the client certificate (kafka.tls.cert_file): none was given, it
	// expired or is not yet valid, or the broker does not trust its CA. It
	// is permanent.
	ErrClientCertificate = errors.New("kafka broker refused the client certificate")
)

// connectError explains a failed first connection (the Ping of a new
// client) to the brokers of cfg; each named cause is permanent:
//   - a refused SASL password wraps ErrAuthentication and names the keys
//     that set it;
//   - a mechanism the listener does not enable (UNSUPPORTED_SASL_MECHANISM,
//     with the ones it enables when a handshake without credentials tells),
//     or SASL against a listener without it (ILLEGAL_SASL_STATE), wraps
//     ErrSASLMechanism;
//   - a broker certificate of an untrusted CA wraps ErrUntrustedCertificate
//     and names kafka.tls.ca_file;
//   - a client certificate the broker refuses (none, expired, not yet
//     valid, or of a CA it does not trust: the bridge looks at its own
//     certificate to tell) wraps ErrClientCertificate.
//
// Anything else (an address, a broker down) is returned as it was, with the
// keys to check.
func connectError(ctx context.Context, cfg Config, err error) error {
	if cfg.TLS.Enabled {
		// In TLS 1.3 a refused client certificate can reach the client as a
		// reset that overtook the broker's alert: a connection that waits
		// for the broker's answer tells (tlsconfig.Refusal).
		if alert, joined := explainDropped(ctx, cfg, err); refusedCertificate(alert) {
			return fmt.Errorf("connecting to kafka %v: %w: %s: %w", cfg.Brokers, ErrClientCertificate, clientCertProblem(cfg, time.Now()), joined)
		}
	}
	var unknownCA x509.UnknownAuthorityError
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("connecting to kafka %v: %w: the brokers refused user %q (kafka.sasl.username) with mechanism %s (kafka.sasl.mechanism); "+
			"check the password in kafka.sasl.password_file or BRIDGE_KAFKA_SASL_PASSWORD: %w",
			cfg.Brokers, ErrAuthentication, cfg.SASL.Username, cfg.SASL.Mechanism, err)
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		enabled := ""
		if ms := enabledMechanisms(ctx, cfg); len(ms) > 0 {
			enabled = fmt.Sprintf(" (it enables %s)", strings.Join(ms, ", "))
		}
		return fmt.Errorf("connecting to kafka %v: %w: the brokers' listener does not enable kafka.sasl.mechanism %s%s; "+
			"set kafka.sasl.mechanism to one it enables, or enable %s on the listener (sasl.enabled.mechanisms): %w",
			cfg.Brokers, ErrSASLMechanism, cfg.SASL.Mechanism, enabled, cfg.SASL.Mechanism, err)
	case cfg.SASL.Mechanism != "" && errors.Is(err, kerr.IllegalSaslState):
		return fmt.Errorf("connecting to kafka %v: %w: kafka.sasl.mechanism is %s but the brokers' listener at this address does not take SASL "+
			"(an SSL or PLAINTEXT listener answers a SASL handshake with ILLEGAL_SASL_STATE); "+
			"use the brokers' SASL_SSL port in kafka.brokers, or remove kafka.sasl: %w",
			cfg.Brokers, ErrSASLMechanism, cfg.SASL.Mechanism, err)
	case errors.As(err, &unknownCA):
		fix := "the broker's certificate is not signed by a CA of the system: set kafka.tls.ca_file to the CA that signed it"
		if cfg.TLS.CAFile != "" {
			fix = fmt.Sprintf("the broker's certificate is not signed by the CA in kafka.tls.ca_file %s: set it to the CA that signed the broker's certificate",
				cfg.TLS.CAFile)
		}
		return fmt.Errorf("connecting to kafka %v: %w: %s: %w", cfg.Brokers, ErrUntrustedCertificate, fix, err)
	case cfg.TLS.Enabled && refusedCertificate(err):
		return fmt.Errorf("connecting to kafka %v: %w: %s: %w", cfg.Brokers, ErrClientCertificate, clientCertProblem(cfg, time.Now()), err)
	}
	return fmt.Errorf("connecting to kafka %v (check kafka.brokers, kafka.tls and kafka.sasl): %w", cfg.Brokers, err)
}

// explainDropped asks the first of cfg's seed brokers about err, a
// dropped connection (tlsconfig.ExplainDropped): its TLS alert, if it sends
// one, and err with the alert joined. One broker tells: the brokers of a
// cluster share their listeners' client authentication, and a broker that
// accepts the client is waited on for 1 s.
func explainDropped(ctx context.Context, cfg Config, err error) (alert, joined error) {
	tc, lerr := tlsconfig.Load("kafka.tls", cfg.TLS)
	if lerr != nil || tc == nil || len(cfg.Brokers) == 0 {
		return nil, err
	}
	addr := cfg.Brokers[0]
	if _, _, serr := net.SplitHostPort(addr); serr != nil {
		addr = net.JoinHostPort(addr, "9092") // franz-go's default port
	}
	return tlsconfig.ExplainDropped(ctx, addr, tc, err)
}

// refusedCertificate reports whether err is a TLS alert from the broker
// about the client's certificate. Java's TLS stack sends bad_certificate
// when it got none, and certificate_unknown (Go: "unknown certificate")
// for one it cannot verify, expired or of an untrusted CA alike.
func refusedCertificate(err error) bool {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return false
	}
	switch op.Err.Error() {
	case "tls: bad certificate", "tls: unknown certificate", "tls: certificate required", "tls: unknown certificate authority",
		"tls: certificate expired", "tls: unsupported certificate", "tls: certificate revoked", "tls: access denied":
		return true
	}
	return false
}

// clientCertProblem says why the broker refused the client certificate of
// cfg, from the certificate itself: the broker's alert does not tell.
func clientCertProblem(cfg Config, now time.Time) string {
	if cfg.TLS.CertFile == "" {
		return "the broker requires a client certificate (ssl.client.auth=required) and none is configured: " +
			"set kafka.tls.cert_file and kafka.tls.key_file to a certificate signed by a CA in the broker's ssl.truststore"
	}
	cert, err := firstCert(cfg.TLS.CertFile)
	if err != nil {
		return fmt.Sprintf("the broker refused the client certificate in kafka.tls.cert_file %s (reading it: %v)", cfg.TLS.CertFile, err)
	}
	switch {
	case now.After(cert.NotAfter):
		return fmt.Sprintf("the client certificate in kafka.tls.cert_file %s (subject %s) expired at %s: renew it and set kafka.tls.cert_file and kafka.tls.key_file to the new one",
			cfg.TLS.CertFile, cert.Subject, cert.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(cert.NotBefore):
		return fmt.Sprintf("the client certificate in kafka.tls.cert_file %s (subject %s) is not valid before %s: check the clocks, or use a certificate valid now",
			cfg.TLS.CertFile, cert.Subject, cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("the broker does not trust the client certificate in kafka.tls.cert_file %s (subject %s, issuer %s): "+
		"use a certificate signed by a CA in the broker's ssl.truststore, or add its issuer there",
		cfg.TLS.CertFile, cert.Subject, cert.Issuer)
}

// enabledMechanisms asks a broker which SASL mechanisms its listener
// enables: a SaslHandshake for cfg's mechanism on a connection without
// credentials is answered with the list. It returns nil when it cannot
// tell (bounded by the dial timeout).
func enabledMechanisms(ctx context.Context, cfg Config) []string {
	probe := cfg
	probe.SASL = SASLConfig{}
	opts, err := probe.clientOpts(slog.New(slog.DiscardHandler))
	if err != nil {
		return nil
	}
	cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(0))...)
	if err != nil {
		return nil
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Version = 1
	req.Mechanism = string(cfg.SASL.Mechanism)
	for _, seed := range cl.SeedBrokers() {
		resp, err := req.RequestWith(ctx, seed)
		if err == nil && len(resp.SupportedMechanisms) > 0 {
			return resp.SupportedMechanisms
		}
	}
	return nil
}
