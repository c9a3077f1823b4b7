package config

import (
	"errors"
	"fmt"
	"maps"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/labels"
)

// The keys of streams[].labels: reference data joined onto every row
// (internal/labels). They are kept apart from the rest of the schema.

// LabelJoin is inner (default) or left: the labels package's type.
type LabelJoin = labels.Join

// LabelConfig is one CSV file of reference data joined onto the stream's
// rows by a key column (streams[].labels[]). The files are read when the
// configuration is validated and again when the stream starts, and kept
// for the life of the process.
type LabelConfig struct {
	// File is the CSV file, with a header line. Required.
	File string `yaml:"file"`
	// Key is the query's column to join on. Required.
	Key string `yaml:"key"`
	// CSVKey is the file's key column. Default: Key.
	CSVKey string `yaml:"csv_key"`
	// Join is inner (default: rows without a label are dropped) or left
	// (they are kept, with null labels).
	Join LabelJoin `yaml:"join"`
	// Columns are the file's columns to add, in order. Default: every
	// column but the key, in the file's order.
	Columns []string `yaml:"columns"`
	// Types maps a column to string (default), int64, float64, bool, hex
	// or hexN (hex20: exactly 20 bytes).
	Types map[string]string `yaml:"types"`
}

// defaultsLabels fills the defaults of a stream's label files.
func defaultsLabels(s *StreamConfig) {
	for i := range s.Labels {
		setDefault(&s.Labels[i].Join, labels.Inner)
	}
}

// LabelConfigs maps streams[].labels onto the labels package's
// configuration.
func (s StreamConfig) LabelConfigs() []labels.Config {
	var out []labels.Config
	for _, l := range s.Labels {
		types := map[string]labels.Type{}
		for k, v := range maps.All(l.Types) {
			types[k] = labels.Type(v)
		}
		out = append(out, labels.Config{File: l.File, Key: l.Key, CSVKey: l.CSVKey, Join: l.Join, Columns: l.Columns, Types: types})
	}
	return out
}

// LoadLabels reads and checks the stream's label files (labels.Load); nil
// when it has none. Its errors name the key (streams (id).labels[i]) and
// are permanent (ErrInvalid).
func (s StreamConfig) LoadLabels() (*labels.Set, error) {
	set, err := labels.Load(s.LabelConfigs())
	if err != nil {
		var msgs []error
		for _, e := range flatten(err) {
			msgs = append(msgs, fmt.Errorf("config streams (%s).%w: %w", s.ID, e, ErrInvalid))
		}
		return nil, errors.Join(msgs...)
	}
	return set, nil
}
