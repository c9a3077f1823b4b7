package source

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	// ErrPermanent matches (errors.Is) every error that retrying cannot fix:
	// the server rejected the query (INVALID_ARGUMENT, NOT_FOUND,
	// UNIMPLEMENTED, UNAUTHENTICATED, PERMISSION_DENIED, ...), sent
	// malformed app_metadata, or the caller supplied an invalid cursor.
	ErrPermanent = errors.New("source: permanent error")

	// ErrTokenMissing is the reason of a StatusError (errors.Is) when the
	// server answered UNAUTHENTICATED and no token is configured. It is
	// permanent.
	ErrTokenMissing = errors.New("source: the Amp server requires a bearer token and none is set; set BRIDGE_AMP_TOKEN or amp.token_file")

	// ErrTokenRefused is the reason of a StatusError (errors.Is) when the
	// server answered UNAUTHENTICATED to the configured token. It is
	// permanent.
	ErrTokenRefused = errors.New("source: the token was refused (UNAUTHENTICATED); check the token in BRIDGE_AMP_TOKEN or amp.token_file")

	// ErrUntrustedCertificate is the reason of a StatusError (errors.Is)
	// when the TLS handshake failed because the server's certificate did
	// not verify: it is signed by a CA not trusted, or names another host.
	// It is permanent: retrying meets the same certificate.
	ErrUntrustedCertificate = errors.New("source: the Amp server's TLS certificate is not trusted; set amp.tls.ca_file to the CA that signed it, " +
		"or amp.tls.server_name to a name the certificate holds")

	// ErrClosed is returned by Next after Close.
	ErrClosed = errors.New("source: stream closed")

	// ErrRetriesExhausted wraps the last error when Backoff.MaxAttempts
	// consecutive attempts failed.
	ErrRetriesExhausted = errors.New("source: reconnect attempts exhausted")

	// ErrIncomplete is returned when a batch (non-streaming) query ends
	// without the ranges_complete batch the server always sends last, i.e. the
	// result was cut short.
	ErrIncomplete = errors.New("source: batch query ended without its ranges_complete batch")
)

// StatusError is a gRPC status returned by the Flight server, with the
// server's message kept verbatim (Amp puts the cause chain in it).
// errors.Is(err, ErrPermanent) is true for the codes that are not retried
// and whenever Reason is set.
type StatusError struct {
	// Op is the call that failed: "GetFlightInfo" or "DoGet".
	Op string
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the server's status message.
	Message string
	// Reason, when not nil, is what the status means for the bridge's
	// configuration: ErrTokenMissing, ErrTokenRefused or
	// ErrUntrustedCertificate. errors.Is matches it, and Error ends with its
	// advice.
	Reason error
}

// Error returns e.g. `source: DoGet: InvalidArgument: invalid query: ...`,
// followed by the Reason's advice when there is one.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("source: %s: %s: %s", e.Op, e.Code, e.Message)
	if e.Reason != nil {
		s += ": " + strings.TrimPrefix(e.Reason.Error(), "source: ")
	}
	return s
}

// Permanent reports whether retrying cannot help: a Reason is set, or the
// code is permanent (see PermanentCode).
func (e *StatusError) Permanent() bool { return e.Reason != nil || PermanentCode(e.Code) }

// Is makes errors.Is(err, ErrPermanent) true for permanent errors, and
// errors.Is(err, e.Reason) true.
func (e *StatusError) Is(target error) bool {
	return (target == ErrPermanent && e.Permanent()) || (e.Reason != nil && target == e.Reason)
}

// Timeout reports whether the call ran out of time (DEADLINE_EXCEEDED): the
// server did not answer within the call's deadline. Like net.Error's, it
// lets a caller say which service did not answer without knowing gRPC.
func (e *StatusError) Timeout() bool { return e.Code == codes.DeadlineExceeded }

// GRPCStatus lets status.FromError and status.Code see the original status.
func (e *StatusError) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// PermanentCode reports whether a status code means the request itself is
// wrong, so that reconnecting would fail the same way: INVALID_ARGUMENT
// (bad SQL, non-incremental streaming query, bad descriptor), NOT_FOUND,
// UNIMPLEMENTED, UNAUTHENTICATED, PERMISSION_DENIED, FAILED_PRECONDITION,
// OUT_OF_RANGE and ALREADY_EXISTS. Every other code (UNAVAILABLE, INTERNAL,
// RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, UNKNOWN, ABORTED, ...) is treated as
// transient (amp-protocol.md §9.3).
func PermanentCode(c codes.Code) bool {
	switch c {
	case codes.InvalidArgument, codes.NotFound, codes.Unimplemented, codes.Unauthenticated,
		codes.PermissionDenied, codes.FailedPrecondition, codes.OutOfRange, codes.AlreadyExists:
		return true
	case codes.OK, codes.Canceled, codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted,
		codes.Aborted, codes.Internal, codes.Unavailable, codes.DataLoss:
		return false
	default: // a code newer than this list
		return false
	}
}

// MetadataError reports app_metadata that does not follow Amp's format
// (amp-protocol.md §2.1). It is permanent: the server is not speaking the
// protocol, and reconnecting would not change that.
type MetadataError struct {
	// Index is the position of the record batch in its DoGet stream (0 is
	// the first batch after the schema), or -1 when unknown.
	Index int
	// Field is the JSON path of the bad field ("ranges", "ranges_complete",
	// "ranges[0].hash", ...), or "" when the whole value is not a JSON object.
	Field string
	// Raw is the received metadata, truncated to 512 bytes.
	Raw string
	// Err is the underlying parse error.
	Err error
}

// Error names the batch, the field and the received text.
func (e *MetadataError) Error() string {
	where := "app_metadata"
	if e.Index >= 0 {
		where = fmt.Sprintf("app_metadata of batch %d", e.Index)
	}
	if e.Field != "" {
		where += " field " + e.Field
	}
	return fmt.Sprintf("source: parsing %s: %v (received %q)", where, e.Err, e.Raw)
}

// Unwrap returns the parse error.
func (e *MetadataError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrPermanent) true.
func (e *MetadataError) Is(target error) bool { return target == ErrPermanent }

// IsRetryable reports whether err is one the stream would reconnect after:
// not permanent, not a context error, not ErrClosed. A batch query does not
// reconnect after it has delivered data; its caller can use IsRetryable to
// decide whether to run the query again.
func IsRetryable(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrPermanent), errors.Is(err, ErrClosed),
		errors.Is(err, ErrRetriesExhausted),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	default:
		return true
	}
}

// permanentError marks a non-status error (an invalid cursor, a malformed
// FlightInfo) as permanent while keeping its text and chain.
type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }

// statusError converts a gRPC error to *StatusError, keeping non-status
// errors (io.EOF, transport errors) as they are.
func statusError(op string, err error) error {
	var already *StatusError
	if errors.As(err, &already) {
		return err
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		st := se.GRPCStatus()
		return &StatusError{Op: op, Code: st.Code(), Message: st.Message()}
	}
	return err
}
