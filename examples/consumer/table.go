package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
)

// SchemaSource looks a writer schema up by its registry id; *sr.Client is
// one.
type SchemaSource interface {
	SchemaByID(ctx context.Context, id int) (sr.Schema, error)
}

// Row is one current row of the table, as the bridge published it.
type Row struct {
	// BatchID and Index identify the row: the microbatch (block range) it
	// came from and its index in that batch (source.batch_id, source.row).
	BatchID string
	Index   int64
	// Block is source.block_num (0 when the query has no block column).
	Block int64
	// Columns are the row's columns (the envelope's "after"), as standard
	// JSON values: numbers, strings, booleans, nested objects and arrays.
	Columns map[string]any
}

// Stats counts what Apply did.
type Stats struct {
	Inserts, Retractions, Tombstones, RowsTombstoned int
}

// Table is the current state of a topic written by amp-kafka-bridge in its
// default mode (key = batch id, Debezium envelope): inserts add rows,
// retractions (op d) remove the row they carry, and a tombstone (null value)
// removes every row of the batch its key names. It is not safe for
// concurrent use.
type Table struct {
	schemas SchemaSource
	codecs  map[int]*goavro.Codec
	rows    map[string]Row // "batch id/row index" -> row
	Stats   Stats
}

// NewTable returns an empty table that fetches writer schemas from schemas.
func NewTable(schemas SchemaSource) *Table {
	return &Table{schemas: schemas, codecs: map[int]*goavro.Codec{}, rows: map[string]Row{}}
}

// envelope is the part of the bridge's change event the table needs.
type envelope struct {
	Op     string          `json:"op"`
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
	Source struct {
		BatchID  string `json:"batch_id"`
		Row      int64  `json:"row"`
		BlockNum *int64 `json:"block_num"`
	} `json:"source"`
}

func rowKey(batch string, index int64) string { return batch + "/" + strconv.FormatInt(index, 10) }

// Apply applies one committed record of the data topic.
func (t *Table) Apply(ctx context.Context, rec *kgo.Record) error {
	if rec.Value == nil { // tombstone: key = batch id
		t.Stats.Tombstones++
		batch := string(rec.Key)
		for k, r := range t.rows {
			if r.BatchID == batch {
				delete(t.rows, k)
				t.Stats.RowsTombstoned++
			}
		}
		return nil
	}
	ev, err := t.decode(ctx, rec.Value)
	if err != nil {
		return fmt.Errorf("decoding %s/%d@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
	}
	key := rowKey(ev.Source.BatchID, ev.Source.Row)
	switch ev.Op {
	case "c", "r":
		var cols map[string]any
		if err := json.Unmarshal(ev.After, &cols); err != nil || cols == nil {
			return fmt.Errorf("%s/%d@%d: op %s without an after image", rec.Topic, rec.Partition, rec.Offset, ev.Op)
		}
		row := Row{BatchID: ev.Source.BatchID, Index: ev.Source.Row, Columns: cols}
		if ev.Source.BlockNum != nil {
			row.Block = *ev.Source.BlockNum
		}
		t.rows[key] = row
		t.Stats.Inserts++
	case "d":
		delete(t.rows, key)
		t.Stats.Retractions++
	default:
		return fmt.Errorf("%s/%d@%d: unknown op %q", rec.Topic, rec.Partition, rec.Offset, ev.Op)
	}
	return nil
}

// decode reads the Confluent wire format (magic 0, 4-byte schema id, Avro
// body) with the writer schema from the registry, into standard JSON.
func (t *Table) decode(ctx context.Context, value []byte) (envelope, error) {
	var h sr.ConfluentHeader
	id, body, err := h.DecodeID(value)
	if err != nil {
		return envelope{}, fmt.Errorf("reading the Confluent header: %w", err)
	}
	codec, ok := t.codecs[id]
	if !ok {
		s, err := t.schemas.SchemaByID(ctx, id)
		if err != nil {
			return envelope{}, fmt.Errorf("fetching schema %d: %w", id, err)
		}
		// Standard JSON: unions are written as their value, not {"type": value}.
		if codec, err = goavro.NewCodecForStandardJSONFull(s.Schema); err != nil {
			return envelope{}, fmt.Errorf("parsing schema %d: %w", id, err)
		}
		t.codecs[id] = codec
	}
	native, rest, err := codec.NativeFromBinary(body)
	if err != nil {
		return envelope{}, err
	}
	if len(rest) != 0 {
		return envelope{}, errors.New("trailing bytes after the Avro value")
	}
	text, err := codec.TextualFromNative(nil, native)
	if err != nil {
		return envelope{}, err
	}
	var ev envelope
	if err := json.Unmarshal(text, &ev); err != nil {
		return envelope{}, err
	}
	return ev, nil
}

// Rows returns the current rows ordered by block, batch id and index.
func (t *Table) Rows() []Row {
	out := make([]Row, 0, len(t.rows))
	for _, r := range t.rows {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Block, b.Block), cmp.Compare(a.BatchID, b.BatchID), cmp.Compare(a.Index, b.Index))
	})
	return out
}

// Len is the number of current rows.
func (t *Table) Len() int { return len(t.rows) }
