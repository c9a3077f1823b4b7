// Package source is the bridge's Amp client: it runs SQL queries on an Amp
// server over Arrow Flight and yields block-range envelopes (amp-protocol.md
// §1–3).
//
// # Requests
//
// A query is GetFlightInfo with a CMD descriptor holding
// Any(arrow.flight.protocol.sql.CommandStatementQuery{query}), then DoGet on
// the single endpoint's ticket, which is treated as opaque bytes and redeemed
// on the same server. The amp-stream header ("true" for [Client.Stream],
// "false" for [Client.Query]) and the amp-resume cursor are sent on
// GetFlightInfo only (the server fixes both in the ticket); "authorization:
// Bearer <token>" is sent on both calls when [Config.Token] is set, and the
// token is never logged; a token without TLS is refused by [Config.Validate]
// unless [Config.AllowPlaintextToken] is set, and then [New] warns. One gRPC
// client (plaintext, or TLS with the system
// roots or a CA file and an optional client certificate) is shared by every
// stream and reused across reconnects. The receive limit is at least 32 MiB.
//
// # Envelopes and ownership
//
// [Stream.Next] returns [Envelope] values. A [KindBatch] envelope carries
// the record batch exactly as decoded by the IPC reader (the record is
// retained, never copied: its buffers point into the received gRPC message),
// its ranges from app_metadata and the ranges_complete flag. The caller owns
// the batch and must Release it; [Stream.Close] releases whatever was read
// ahead but not returned. The message's memory goes back to the Client at
// [Envelope.Release], for a message received later: nothing may read the
// batch, or a value taken from it without a copy, after that. Each
// message's memory is a buffer of a size class at most a quarter larger
// than the message, and that is what counts against the read budget.
//
// app_metadata is parsed strictly ([ParseAppMetadata]); a bad value ends the
// stream with a [*MetadataError] naming the batch index and the field.
// Dictionary batches are handled by the IPC reader. A 0-row batch with
// ranges_complete false is a keep-alive ([Envelope.KeepAlive]): it is
// yielded (it carries the microbatch's range) and is never an end of stream
// or a reorg. There is no idle watchdog: Amp may be silent for as long as no
// new block arrives, so a healthy stream can wait indefinitely; stop it with
// its context or Close. A ranges_complete batch with rows, which Amp never
// sends, is yielded as a data envelope followed by a 0-row complete one, so
// no row is lost.
//
// # Backpressure
//
// One goroutine per stream reads ahead of the consumer by at most
// [Config.ReadAhead] envelopes, plus gRPC's HTTP/2 window. All the streams
// and queries of a Client share one read budget of [Config.ReadAheadBytes].
// A stream reserves room for its next message before it asks gRPC for it,
// waiting in line when the budget is used up: twice the message's length
// (gRPC's frames, then the message's copy of them), which the Client reads
// from the message's 5-byte gRPC prefix in the HTTP/2 frames of its
// connection as they arrive, before gRPC does (gRPC itself, once asked for
// a message, widens the stream's window to its length and receives it
// whole). Until the prefix arrives the stream holds nothing, so a stream
// at the head of its chain, waiting for a block, keeps no room from the
// others; Amp can send it at most its HTTP/2 window meanwhile. The message
// counts until the consumer releases the envelope made of it
// ([Envelope.Release]), so the budget bounds what is queued and what the
// consumers are still encoding, not only what is read ahead. The bytes
// held exceed the budget only by a message larger than all of it (received
// alone) and by a message whose length could not be read first (its
// stream had ended; [ReadBudgetStats.Unsized]). Consumers must release each
// envelope before they wait for anything but Amp; closing a stream gives
// back what its consumer still holds. When the consumer stops calling
// Next, the reader stops reading and gRPC flow control stops the server.
//
// # Reconnects
//
// A streaming query ends only on an error. UNAVAILABLE, INTERNAL,
// RESOURCE_EXHAUSTED, other non-permanent codes, transport resets and an end
// of stream make it reconnect with a capped exponential backoff with jitter
// ([BackoffConfig]). Reconnects are visible: Next first returns the
// envelopes already read from the failed stream, then one [KindReconnect]
// envelope, then the envelopes of the new stream. The consumer must roll back
// its uncommitted state when it sees the marker; the cursor function given
// to [Client.Stream] is called for the new GetFlightInfo only when Next is
// called after the marker, so the new stream resumes from the consumer's
// committed position at that moment. The cursor is validated before it is
// sent, because Amp silently ignores an invalid cursor and restarts from the
// first block.
//
// To reconnect on the consumer's initiative (a reorg.ReconnectError, or an
// Undo that asks for a replay), Close the stream and open a new one with the
// new cursor: the Client and its gRPC connection are reused, and Close
// releases everything read ahead.
//
// A batch query ([Client.Query]) ends with io.EOF after its ranges_complete
// batch. It is retried only while it has delivered nothing; a later failure
// ends it ([IsRetryable] tells the caller whether to run it again), since a
// re-run would repeat rows.
//
// # Errors
//
// INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED, UNAUTHENTICATED,
// PERMISSION_DENIED (and FAILED_PRECONDITION, OUT_OF_RANGE, ALREADY_EXISTS)
// fail fast as a [*StatusError] with the server's message; every permanent
// error matches [ErrPermanent] with errors.Is. Three of them say what to
// configure ([StatusError.Reason]): UNAUTHENTICATED without a token
// ([ErrTokenMissing]) or with one ([ErrTokenRefused]), and a TLS handshake
// that could not verify the server's certificate ([ErrUntrustedCertificate],
// an UNAVAILABLE that is not retried). [ErrRetriesExhausted] ends a
// stream after [BackoffConfig.MaxAttempts] consecutive failures (0: never).
// Cancelling the stream's context stops the reader and the gRPC stream at
// once and Next returns ctx.Err(). Every goroutine a stream starts is waited
// for by [Stream.Close].
package source
