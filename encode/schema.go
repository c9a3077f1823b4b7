package encode

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/schemas"
)

// Record names inside the stream's namespace.
const (
	rowRecordName      = "Value"
	envelopeRecordName = "Envelope"
	keyRecordName      = "Key"
)

// flatMetaFields lists the metadata fields of the flat envelope, appended
// after the row's columns in this order. The hot path writes them in the
// same order.
func flatMetaFields() []string {
	return []string{"_amp_op", "_amp_ts_ms", "_amp_stream", "_amp_network", "_amp_block_num",
		"_amp_batch_id", "_amp_range_start", "_amp_range_end", "_amp_range_hash", "_amp_range_prev_hash",
		"_amp_row", "_amp_snapshot", "_amp_cause"}
}

// Schemas are the Avro schemas (JSON text) of one stream.
type Schemas struct {
	// Namespace is the Avro namespace of the generated records.
	Namespace string
	// Row is the row record: the type of the envelope's before/after.
	Row string
	// Value is the value schema, registered as <topic>-value.
	Value string
	// Key is the key record in row-key mode (registered as <topic>-key),
	// empty when records are keyed by batch id.
	Key string
}

// compiler turns Arrow types into Avro types and column writers.
type compiler struct {
	cfg   Config
	ns    string
	st    *encState
	names map[string]string // Avro full name → column path that defined it
}

func (c *compiler) recordName(base, col string) (string, error) {
	name := base
	for n := 2; ; n++ {
		prev, taken := c.names[name]
		if !taken {
			c.names[name] = col
			return name, nil
		}
		if prev == col {
			return "", fmt.Errorf("%w: record name %q defined twice for column %q", ErrNameCollision, name, col)
		}
		name = base + "_" + strconv.Itoa(n)
	}
}

// compileRecord compiles fields as an Avro record named name.
func (c *compiler) compileRecord(name, colPrefix string, fields []arrow.Field) (*avroType, []writer, error) {
	name, err := c.recordName(name, colPrefix+"{}")
	if err != nil {
		return nil, nil, err
	}
	rec := &avroType{kind: kRecord, name: name, namespace: c.ns}
	set := newNameSet("record " + name)
	ws := make([]writer, 0, len(fields))
	for _, f := range fields {
		fname, err := set.add(f.Name)
		if err != nil {
			return nil, nil, err
		}
		col := colPrefix + f.Name
		t, w, err := c.compile(f.Type, f.Nullable, name+"_"+fname, col)
		if err != nil {
			return nil, nil, err
		}
		af := &avroField{name: fname, typ: t}
		if f.Nullable || t.kind == kNull {
			af.hasDefault, af.def = true, []byte("null")
		}
		if fname != f.Name {
			af.doc = "Arrow column " + strconv.Quote(f.Name)
		}
		rec.fields = append(rec.fields, af)
		ws = append(ws, w)
	}
	return rec, ws, nil
}

func unsupported(col string, dt arrow.DataType, hint string) error {
	return fmt.Errorf("%w: column %q has type %s: %s", ErrUnsupportedType, col, dt, hint)
}

const castHint = "CAST it in the query to a supported type (see the mapping table in package encode)"

// compile maps one Arrow type to an Avro type (wrapped in ["null", T] when
// nullable) and its writer. typeName names a record or fixed created here.
func (c *compiler) compile(dt arrow.DataType, nullable bool, typeName, col string) (*avroType, writer, error) {
	v := valid{nullable: nullable, col: col, st: c.st}
	var (
		t *avroType
		w writer
	)
	switch dt.ID() {
	case arrow.NULL:
		return prim(kNull), nullWriter{}, nil
	case arrow.BOOL:
		t, w = prim(kBoolean), &boolWriter{valid: v}
	case arrow.INT8:
		t, w = prim(kInt), &intWriter[int8]{valid: v}
	case arrow.INT16:
		t, w = prim(kInt), &intWriter[int16]{valid: v}
	case arrow.INT32:
		t, w = prim(kInt), &intWriter[int32]{valid: v}
	case arrow.UINT8:
		t, w = prim(kInt), &intWriter[uint8]{valid: v}
	case arrow.UINT16:
		t, w = prim(kInt), &intWriter[uint16]{valid: v}
	case arrow.UINT32:
		t, w = prim(kLong), &intWriter[uint32]{valid: v}
	case arrow.INT64:
		t, w = prim(kLong), &intWriter[int64]{valid: v}
	case arrow.UINT64:
		t, w = prim(kLong), &uint64Writer{valid: v}
	case arrow.FLOAT32:
		t, w = prim(kFloat), &float32Writer{valid: v}
	case arrow.FLOAT64:
		t, w = prim(kDouble), &float64Writer{valid: v}
	case arrow.STRING:
		t, w = prim(kString), &binWriter[int32]{valid: v, utf8: true}
	case arrow.LARGE_STRING:
		t, w = prim(kString), &binWriter[int64]{valid: v, utf8: true}
	case arrow.STRING_VIEW:
		t, w = prim(kString), &viewWriter{valid: v, utf8: true}
	case arrow.BINARY:
		t, w = prim(kBytes), &binWriter[int32]{valid: v}
	case arrow.LARGE_BINARY:
		t, w = prim(kBytes), &binWriter[int64]{valid: v}
	case arrow.BINARY_VIEW:
		t, w = prim(kBytes), &viewWriter{valid: v}
	case arrow.FIXED_SIZE_BINARY:
		n := dt.(*arrow.FixedSizeBinaryType).ByteWidth
		switch c.cfg.FixedAs {
		case FixedAsHex:
			t = prim(kString)
		case FixedAsBytes:
			t = prim(kBytes)
		case FixedAsFixed:
			t = &avroType{kind: kFixed, name: "Bytes" + strconv.Itoa(n), namespace: c.ns, size: n}
		}
		w = &fixedWriter{valid: v, width: n, as: c.cfg.FixedAs}
	case arrow.DECIMAL128:
		d := dt.(*arrow.Decimal128Type)
		if d.Precision < 1 || d.Precision > 38 || d.Scale < 0 || d.Scale > d.Precision {
			return nil, nil, unsupported(col, dt, "Avro decimals need 1 <= precision and 0 <= scale <= precision")
		}
		mx := decimal128.GetMaxValue(d.Precision)
		t = &avroType{kind: kBytes, logical: "decimal", precision: int(d.Precision), scale: int(d.Scale)}
		mn := mx.Negate()
		w = &dec128Writer{valid: v, max: mx, min: mn, prec: d.Precision, scale: d.Scale,
			maxHi: mx.HighBits(), maxLo: mx.LowBits(), minHi: mn.HighBits(), minLo: mn.LowBits()}
	case arrow.DECIMAL256:
		d := dt.(*arrow.Decimal256Type)
		if d.Precision < 1 || d.Precision > 76 || d.Scale < 0 || d.Scale > d.Precision {
			return nil, nil, unsupported(col, dt, "Avro decimals need 1 <= precision and 0 <= scale <= precision")
		}
		mx := decimal256.GetMaxValue(d.Precision)
		t = &avroType{kind: kBytes, logical: "decimal", precision: int(d.Precision), scale: int(d.Scale)}
		w = &dec256Writer{valid: v, max: mx, min: mx.Negate(), prec: d.Precision, scale: d.Scale}
	case arrow.TIMESTAMP:
		ts := dt.(*arrow.TimestampType)
		prefix := "timestamp-"
		if ts.TimeZone == "" {
			prefix = "local-timestamp-"
		}
		switch ts.Unit {
		case arrow.Second:
			t, w = &avroType{kind: kLong, logical: prefix + "millis"}, &scaledWriter{valid: v, mul: 1000, what: "timestamp in seconds"}
		case arrow.Millisecond:
			t, w = &avroType{kind: kLong, logical: prefix + "millis"}, &intWriter[int64]{valid: v}
		case arrow.Microsecond:
			t, w = &avroType{kind: kLong, logical: prefix + "micros"}, &intWriter[int64]{valid: v}
		case arrow.Nanosecond:
			fallthrough
		default:
			t, w = &avroType{kind: kLong, logical: prefix + "nanos"}, &intWriter[int64]{valid: v}
		}
	case arrow.DATE32:
		t, w = &avroType{kind: kInt, logical: "date"}, &intWriter[int32]{valid: v}
	case arrow.DATE64:
		t, w = &avroType{kind: kInt, logical: "date"}, &scaledWriter{valid: v, div: 86_400_000, what: "Date64 value"}
	case arrow.TIME32:
		if dt.(*arrow.Time32Type).Unit != arrow.Millisecond {
			return nil, nil, unsupported(col, dt, "only Time32(ms) maps to time-millis; "+castHint)
		}
		t, w = &avroType{kind: kInt, logical: "time-millis"}, &intWriter[int32]{valid: v}
	case arrow.TIME64:
		if dt.(*arrow.Time64Type).Unit != arrow.Microsecond {
			return nil, nil, unsupported(col, dt, "only Time64(us) maps to time-micros; "+castHint)
		}
		t, w = &avroType{kind: kLong, logical: "time-micros"}, &intWriter[int64]{valid: v}
	case arrow.LIST, arrow.LARGE_LIST, arrow.FIXED_SIZE_LIST:
		lt := dt.(arrow.ListLikeType)
		elem := lt.ElemField()
		it, iw, err := c.compile(elem.Type, elem.Nullable, typeName, col+"[]")
		if err != nil {
			return nil, nil, err
		}
		t = &avroType{kind: kArray, items: it}
		switch x := dt.(type) {
		case *arrow.ListType:
			w = &listWriter[int32]{valid: v, child: iw}
		case *arrow.LargeListType:
			w = &listWriter[int64]{valid: v, child: iw}
		case *arrow.FixedSizeListType:
			w = &fixedListWriter{valid: v, size: int(x.Len()), child: iw}
		}
	case arrow.STRUCT:
		rec, ws, err := c.compileRecord(typeName, col+".", dt.(*arrow.StructType).Fields())
		if err != nil {
			return nil, nil, err
		}
		t, w = rec, &structWriter{valid: v, children: ws}
	case arrow.MAP:
		m := dt.(*arrow.MapType)
		switch m.KeyType().ID() {
		case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
		default:
			return nil, nil, unsupported(col, dt, "Avro map keys are strings; CAST the keys to VARCHAR or turn the map into a list of structs in the query")
		}
		_, kw, err := c.compile(m.KeyType(), false, typeName+"_key", col+"{key}")
		if err != nil {
			return nil, nil, err
		}
		item := m.ItemField()
		vt, vw, err := c.compile(item.Type, item.Nullable, typeName+"_value", col+"{value}")
		if err != nil {
			return nil, nil, err
		}
		t, w = &avroType{kind: kMap, values: vt}, &mapWriter{valid: v, key: kw, item: vw}
	case arrow.DICTIONARY:
		d := dt.(*arrow.DictionaryType)
		it, iw, err := c.compile(d.ValueType, false, typeName, col)
		if err != nil {
			return nil, nil, err
		}
		if it.kind == kNull {
			return it, nullWriter{}, nil
		}
		t = it
		switch d.IndexType.ID() {
		case arrow.INT8:
			w = &dictWriter[int8]{valid: v, inner: iw}
		case arrow.INT16:
			w = &dictWriter[int16]{valid: v, inner: iw}
		case arrow.INT32:
			w = &dictWriter[int32]{valid: v, inner: iw}
		case arrow.INT64:
			w = &dictWriter[int64]{valid: v, inner: iw}
		case arrow.UINT8:
			w = &dictWriter[uint8]{valid: v, inner: iw}
		case arrow.UINT16:
			w = &dictWriter[uint16]{valid: v, inner: iw}
		case arrow.UINT32:
			w = &dictWriter[uint32]{valid: v, inner: iw}
		case arrow.UINT64:
			w = &dictWriter[uint64]{valid: v, inner: iw}
		default:
			return nil, nil, unsupported(col, dt, "dictionary index type must be an integer")
		}
		if nullable {
			t = optional(t)
		}
		return t, w, nil
	default:
		return nil, nil, unsupported(col, dt, castHint)
	}
	if nullable {
		t = optional(t)
	}
	return t, w, nil
}

// compiledSchema is the result of compiling an Arrow schema for one Config.
type compiledSchema struct {
	schemas  Schemas
	row      *avroType // the row record (flat: with the _amp_* fields)
	value    *avroType
	key      *avroType
	cols     []writer // one per Arrow column
	keyCols  []writer // row-key mode: one per key column
	keyIndex []int    // row-key mode: Arrow column index of each key column
	blockCol int      // index of _block_num (or block_num), -1 when absent
}

func compileSchema(cfg Config, s *arrow.Schema, st *encState) (*compiledSchema, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating encode config: %w", err)
	}
	ns := cfg.namespace()
	c := &compiler{cfg: cfg, ns: ns, st: st, names: map[string]string{}}
	fields := s.Fields()
	row, cols, err := c.compileRecord(rowRecordName, "", fields)
	if err != nil {
		return nil, err
	}
	out := &compiledSchema{row: row, cols: cols, blockCol: -1}
	for _, name := range []string{"_block_num", "block_num"} {
		if idx := s.FieldIndices(name); len(idx) == 1 {
			switch s.Field(idx[0]).Type.ID() {
			case arrow.UINT64, arrow.INT64, arrow.UINT32, arrow.INT32:
				out.blockCol = idx[0]
			}
			if out.blockCol >= 0 {
				break
			}
		}
	}
	out.schemas.Namespace = ns
	out.schemas.Row = row.marshal()

	switch cfg.Envelope {
	case EnvelopeFlat:
		set := newNameSet("record " + rowRecordName)
		for _, f := range fields {
			if _, err := set.add(f.Name); err != nil {
				return nil, err
			}
		}
		for _, m := range flatMetaFields() {
			if _, err := set.add(m); err != nil {
				return nil, fmt.Errorf("flat envelope: %w", err)
			}
			row.fields = append(row.fields, flatMetaField(m))
		}
		out.value = row
	case EnvelopeDebezium: // cfg.Validate refused any other value
		src, err := parseSchema(schemas.Source())
		if err != nil {
			return nil, fmt.Errorf("parsing embedded source.avsc: %w", err)
		}
		out.value = &avroType{kind: kRecord, name: envelopeRecordName, namespace: ns,
			doc: "Debezium-compatible change event written by amp-kafka-bridge.",
			fields: []*avroField{
				{name: "before", typ: optional(row), hasDefault: true, def: []byte("null"), doc: "The row before the change: set for retractions (op d)."},
				{name: "after", typ: optional(row), hasDefault: true, def: []byte("null"), doc: "The row after the change: set for inserts (op c and r)."},
				{name: "source", typ: src},
				{name: "op", typ: prim(kString), doc: "c: live insert, r: backfill insert, d: retraction."},
				{name: "ts_ms", typ: prim(kLong), doc: "When the bridge wrote the event, milliseconds since the Unix epoch."},
			}}
	}
	out.schemas.Value = out.value.marshal()

	if len(cfg.KeyColumns) > 0 {
		kc := &compiler{cfg: cfg, ns: ns, st: st, names: map[string]string{}}
		var kfields []arrow.Field
		for _, k := range cfg.KeyColumns {
			idx := s.FieldIndices(k)
			if len(idx) != 1 {
				return nil, fmt.Errorf("%w: key_columns names %q, and the query result has %d columns of that name (want exactly 1; its columns: %s)",
					ErrKeyColumn, k, len(idx), columnNames(s))
			}
			kfields = append(kfields, s.Field(idx[0]))
			out.keyIndex = append(out.keyIndex, idx[0])
		}
		key, kws, err := kc.compileRecord(keyRecordName, "", kfields)
		if err != nil {
			return nil, fmt.Errorf("key record: %w", err)
		}
		out.key, out.keyCols = key, kws
		out.schemas.Key = key.marshal()
	}
	return out, nil
}

func flatMetaField(name string) *avroField {
	f := &avroField{name: name}
	switch name {
	case "_amp_block_num":
		f.typ, f.hasDefault, f.def = optional(prim(kLong)), true, []byte("null")
	case "_amp_range_prev_hash", "_amp_cause":
		f.typ, f.hasDefault, f.def = optional(prim(kString)), true, []byte("null")
	case "_amp_ts_ms", "_amp_range_start", "_amp_range_end", "_amp_row":
		f.typ = prim(kLong)
	case "_amp_snapshot":
		f.typ = prim(kBoolean)
	default:
		f.typ = prim(kString)
	}
	return f
}

// BuildSchemas returns the Avro schemas for an Arrow schema without building
// an encoder (used by `bridge schema`).
func BuildSchemas(cfg Config, s *arrow.Schema) (Schemas, error) {
	cs, err := compileSchema(cfg, s, &encState{})
	if err != nil {
		return Schemas{}, err
	}
	return cs.schemas, nil
}

// columnNames lists a schema's column names for error messages.
func columnNames(s *arrow.Schema) string {
	names := make([]string, s.NumFields())
	for i, f := range s.Fields() {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}
