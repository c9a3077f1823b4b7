package config

// SchemaEvolution says which changes of a stream's SQL or of Amp's result
// schema a stream accepts under its id (streams[].schema_evolution). The
// decision is Avro's, against every version registered under the data
// topic's value subject; the README's "Schema evolution" says what holds.
type SchemaEvolution string

// Schema evolution modes.
const (
	// EvolutionBackward (default) accepts a change whose new value schema
	// reads every registered version's data (a new nullable column, a
	// dropped column, a numeric type Avro promotes): consumers upgrade
	// their reader schema first or not at all.
	EvolutionBackward SchemaEvolution = "backward"
	// EvolutionNone refuses any change of the SQL or of the result schema
	// under the stream id (the bridge's behaviour before evolution).
	EvolutionNone SchemaEvolution = "none"
	// EvolutionFull accepts only a change that is backward and forward
	// compatible with every registered version: old readers also read the
	// new data (a column added or dropped must be nullable with a default).
	EvolutionFull SchemaEvolution = "full"
)

// Accepts reports whether the mode lets a stream's SQL or schema change
// under its id at all (the Avro check decides which changes).
func (e SchemaEvolution) Accepts() bool { return e != EvolutionNone }

// defaultsEvolution sets the stream's schema evolution default.
func defaultsEvolution(s *StreamConfig) { setDefault(&s.SchemaEvolution, EvolutionBackward) }

// validateEvolution checks streams[].schema_evolution.
func validateEvolution(key string, s StreamConfig) error {
	return checkEnum(key+".schema_evolution", s.SchemaEvolution, EvolutionBackward, EvolutionNone, EvolutionFull)
}
