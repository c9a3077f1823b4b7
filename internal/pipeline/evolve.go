package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
)

// Schema evolution under a stream id (streams[].schema_evolution, README
// "Schema evolution"): a stream whose SQL or Arrow schema changed since its
// checkpoint is let through reconciliation (offsets.RecoverEvolving), and
// the change is decided when the value schema is registered: the new
// version must pass the configured rule against every version registered
// under the subject (encode.Registry.PrepareRule), else the stream stops
// with a *SchemaChangeError naming the ways forward. Rows already published
// stay as they were written; a retraction of one carries it in its own
// schema (the id in its header, whose text the retractor loads from the
// registry: learnSchemas, knowSchema).

// SchemaChangeError is a change of a stream's SQL or schema that its
// schema_evolution refuses: the subject's registered versions do not accept
// the new value schema. It names the two ways forward and wraps the
// *encode.IncompatibleError (subject, rule, both schemas), so it is
// permanent.
type SchemaChangeError struct {
	// Stream and Topic name the stream and its data topic.
	Stream, Topic string
	// Evolution is the stream's schema_evolution.
	Evolution config.SchemaEvolution
	// NextBlock is the first block the stream would publish (the block
	// after its cursor); 0 when it has several networks or none.
	NextBlock uint64
	// Err is the refusal.
	Err error
}

// Error says what was refused and the two ways forward.
func (e *SchemaChangeError) Error() string {
	block := "N"
	if e.NextBlock > 0 {
		block = fmt.Sprint(e.NextBlock)
	}
	return fmt.Sprintf("stream %s: the changed SQL or schema cannot be published to topic %s under schema_evolution %s: %v. "+
		"Two ways forward: (1) publish the changed query under a new stream id with its own topic (streams[].id, streams[].topic): "+
		"it starts afresh, and topic %s keeps what this stream published; or (2) keep the stream id and move it to a new topic: "+
		"with the bridge stopped and the previous SQL still configured, `bridge rewind -c bridge.yaml -stream %s -to-block %s` "+
		"(the first block to publish with the new schema; the stream's next block is %s) retracts what was published from there on, "+
		"then set streams[].sql to the new query and streams[].topic to a new topic: the stream goes on from that block on the new "+
		"topic under a new subject, and the rows before it stay in %s in the schema they were written with",
		e.Stream, e.Topic, e.Evolution, e.Err, e.Topic, e.Stream, block, block, e.Topic)
}

// Unwrap returns the refusal.
func (e *SchemaChangeError) Unwrap() error { return e.Err }

// recoverCheckpoint reconciles the stream's checkpoint with Kafka, letting a
// changed fingerprint through when the stream evolves its schema.
func (r *Stream) recoverCheckpoint(ctx context.Context) (offsets.Decision, error) {
	// Each step is tracked: the stream's health (and a cluster member's
	// warning about a stream that does not stop) names the one that waits.
	store := trackedStore{Store: r.deps.Store, h: r.deps.Health}
	control := trackedControl{c: r.control(), h: r.deps.Health}
	if !r.cfg.SchemaEvolution.Accepts() {
		return offsets.Recover(ctx, store, control, r.cfg.ID, r.fingerprint, r.deps.Now())
	}
	d, err := offsets.RecoverEvolving(ctx, store, control, r.cfg.ID, r.fingerprint, r.deps.Now())
	if err == nil && d.Changed != "" {
		r.log.Info("the stream's SQL or schema changed under its id: the value subject's registered versions decide whether it goes on",
			"schema_evolution", string(r.cfg.SchemaEvolution), "recorded_fingerprint", d.Changed, "fingerprint", r.fingerprint)
	}
	return d, err
}

// rule is the compatibility rule of the stream's schema_evolution.
func (r *Stream) rule() encode.Rule {
	if r.cfg.SchemaEvolution == config.EvolutionFull {
		return encode.RuleFull
	}
	return encode.RuleBackward
}

// registerSchemas registers enc's schemas for topic: after a change of the
// SQL or of the result schema under the stream id with the stream's rule
// (encode.Registry.PrepareRule: the bridge's check decides, and the
// registry's refusal is honoured), else as any registration
// (encode.Registry.Prepare: the registry's compatibility level decides).
func (r *Stream) registerSchemas(ctx context.Context, topic string, enc *encode.Encoder) error {
	if r.changed == "" {
		if err := r.deps.Registry.Prepare(ctx, topic, enc); err != nil {
			return fmt.Errorf("registering the schemas of stream %s: %w", r.cfg.ID, err)
		}
		return nil
	}
	err := r.deps.Registry.PrepareRule(ctx, topic, enc, r.rule())
	if errors.Is(err, encode.ErrIncompatible) {
		var next uint64
		if c := r.committed.Cursor(); len(c) == 1 {
			for _, p := range c {
				next = p.Number + 1
			}
		}
		return &SchemaChangeError{Stream: r.cfg.ID, Topic: topic, Evolution: r.cfg.SchemaEvolution, NextBlock: next, Err: err}
	}
	if err != nil {
		return fmt.Errorf("registering the schemas of stream %s: %w", r.cfg.ID, err)
	}
	id, _ := enc.ValueFraming().ID()
	r.log.Info("schema evolved under the stream id", "subject", encode.ValueSubject(topic), "schema_id", id)
	return nil
}

// refuseUnregistered refuses a changed SQL or schema without a registry:
// the records name their schema only by fingerprint, and the old schema's
// text, which a retraction of an old row needs, is kept nowhere.
func (r *Stream) refuseUnregistered() error {
	if r.changed == "" {
		return nil
	}
	return fmt.Errorf("stream %s: the SQL or schema changed under the stream id, and schema evolution needs a schema registry "+
		"(registry.url): without one the records carry only their schema's fingerprint and the old schema is kept nowhere, so "+
		"a retraction of a row published before the change could not be written. Configure a registry (then the stream goes on "+
		"if the change is compatible), restore the previous SQL, or publish the changed query under a new stream id and topic: %w",
		r.cfg.ID, offsets.ErrFingerprintChanged)
}

// learnSchemas gives the retractor the value schema of every retained
// batch written with another schema id than the current one, so that a
// retraction across a schema change is written in the schema of the rows it
// retracts without a registry lookup inside the transaction.
func (r *Stream) learnSchemas(ctx context.Context) error {
	if r.deps.Registry == nil {
		return nil
	}
	for _, b := range r.committed.Batches {
		if b.SchemaID == 0 {
			continue
		}
		if err := r.learnSchema(ctx, encode.ConfluentFraming(b.SchemaID)); err != nil {
			return fmt.Errorf("stream %s: loading the schema batch %s was written with: %w", r.cfg.ID, b.ID, err)
		}
	}
	return nil
}

// knowSchema makes sure the retractor knows the schema the record value
// was written with (a batch of a checkpoint without schema ids, or one
// rebuilt from the control topic's deltas, names it only in its records).
func (r *Stream) knowSchema(ctx context.Context, value []byte) error {
	f, _, err := encode.ParseHeader(value)
	if err != nil || r.deps.Registry == nil {
		return nil // Retract reports it
	}
	return r.learnSchema(ctx, f)
}

func (r *Stream) learnSchema(ctx context.Context, f encode.Framing) error {
	id, ok := f.ID()
	if !ok || r.retractor.Knows(f) {
		return nil
	}
	text, err := r.deps.Registry.SchemaText(ctx, id)
	if err != nil {
		return err
	}
	return r.retractor.Add(f, text)
}

// valueSchemaID is the registry id the stream writes its values with, 0
// without a registry.
func (r *Stream) valueSchemaID() int {
	if r.enc == nil {
		return 0
	}
	id, _ := r.enc.ValueFraming().ID()
	return id
}

// schemaMoved turns the encoder's refusal of a batch whose Arrow schema is
// not the stream's (encode.ErrSchemaChanged: Amp's result changed under the
// running stream, e.g. a new dataset version seen on a reconnect) into a
// restart when the stream evolves its schema and Amp now plans the SQL with
// another schema: the restart reconnects, and registering the new schema
// decides the change like any other. When Amp still plans the old schema
// the refusal stays permanent (Amp disagrees with itself; a restart would
// not help). err is returned unchanged in every other case.
func (r *Stream) schemaMoved(ctx context.Context, err error) error {
	if !errors.Is(err, encode.ErrSchemaChanged) || !r.cfg.SchemaEvolution.Accepts() {
		return err
	}
	planned, perr := r.deps.Amp.Schema(ctx, r.cfg.SQL)
	if perr != nil {
		return fmt.Errorf("stream %s: Amp's result schema changed under the running stream (%s), and asking Amp for its plan failed: %w",
			r.cfg.ID, err.Error(), NoAnswer(AmpService(r.deps.Amp), perr))
	}
	if planned.Equal(r.schema) {
		return err
	}
	r.log.Info("Amp's result schema changed under the running stream: restarting to check the change",
		"schema_evolution", string(r.cfg.SchemaEvolution))
	// Not %w: the encoder's error is permanent, this one is not.
	return fmt.Errorf("stream %s: Amp's result schema changed under the running stream (%s): restarting to register the new schema under schema_evolution %s",
		r.cfg.ID, err.Error(), r.cfg.SchemaEvolution)
}

// trackedStore is a checkpoint store whose calls are tracked in the
// stream's health while they run.
type trackedStore struct {
	offsets.Store
	h Health
}

// Load tracks the store's Load.
func (s trackedStore) Load(ctx context.Context, stream string) (offsets.Checkpoint, error) {
	defer s.h.Track("checkpoint store: reading the checkpoint")()
	return s.Store.Load(ctx, stream)
}

// Commit tracks the store's Commit.
func (s trackedStore) Commit(ctx context.Context, cp offsets.Checkpoint) error {
	defer s.h.Track("checkpoint store: writing the checkpoint rebuilt from the control topic")()
	return s.Store.Commit(ctx, cp)
}

// trackedControl is the control topic's reader whose reads are tracked in
// the stream's health while they run.
type trackedControl struct {
	c *offsets.Control
	h Health
}

// NewestState tracks the control topic's NewestState.
func (c trackedControl) NewestState(ctx context.Context, stream string, from int64) (*offsets.ControlState, error) {
	defer c.h.Track("kafka: reading the control topic (after every transaction open on it ends)")()
	return c.c.NewestState(ctx, stream, from)
}
