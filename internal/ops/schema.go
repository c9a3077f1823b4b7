package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// SchemaResult is the Avro schemas a stream registers.
type SchemaResult struct {
	// Stream is the stream's id, Topic its data topic.
	Stream, Topic string
	// ValueSubject and Value are the value schema and its subject.
	ValueSubject, Value string
	// KeySubject and Key are the row-key schema and its subject; empty in
	// batch-key mode.
	KeySubject, Key string
}

// Schema returns the Avro schemas stream sc registers: it plans the SQL at
// Amp (the only service it connects to) and derives the schemas from the
// Arrow schema. network names the network of a topic named with
// {network}; empty otherwise.
func Schema(ctx context.Context, amp *source.Client, sc config.StreamConfig, network, version string) (SchemaResult, error) {
	res := SchemaResult{Stream: sc.ID}
	s, err := amp.Schema(ctx, sc.SQL)
	if err != nil {
		return res, fmt.Errorf("stream %s: planning its SQL at Amp: %w", sc.ID, pipeline.NoAnswer(pipeline.AmpService(amp), err))
	}
	if s, err = pipeline.LabelledSchema(sc, s); err != nil {
		return res, err
	}
	var nets []string
	if network != "" {
		nets = []string{network}
	}
	if res.Topic, err = sc.TopicName(nets); err != nil {
		return res, fmt.Errorf("%w (pass -network)", err)
	}
	encCfg, err := sc.EncodeConfig(res.Topic, version)
	if err != nil {
		return res, err
	}
	schemas, err := encode.BuildSchemas(encCfg, s)
	if err != nil {
		return res, fmt.Errorf("stream %s: %w", sc.ID, err)
	}
	res.ValueSubject, res.Value = encode.ValueSubject(res.Topic), schemas.Value
	if schemas.Key != "" {
		res.KeySubject, res.Key = encode.KeySubject(res.Topic), schemas.Key
	}
	return res, nil
}

// WriteText writes the schemas for people (bridge schema), indented, each
// under a line naming its subject.
func (r SchemaResult) WriteText(w io.Writer) {
	fmt.Fprintf(w, "# stream %s: subject %s\n%s\n", r.Stream, r.ValueSubject, indentJSON(r.Value))
	if r.Key != "" {
		fmt.Fprintf(w, "# stream %s: subject %s\n%s\n", r.Stream, r.KeySubject, indentJSON(r.Key))
	}
}

func indentJSON(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return s
	}
	return string(b)
}
