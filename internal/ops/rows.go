package ops

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Verify compares rows in one canonical form, reached by two paths that
// share no code with the encoder: Amp's Arrow rows are rendered directly
// (renderArrowRow), and the topic's records are decoded by goavro with
// their writer schema and rendered by walking that schema
// (avroSchema.renderRow). The canonical form of a row is a JSON array of
// its columns in order:
//
//   - integers, dates (days), times and timestamps (in the Avro unit: a
//     seconds timestamp as milliseconds, a Date64 as days) as JSON numbers;
//   - floats as their shortest decimal ("NaN", "+Inf", "-Inf" as strings);
//   - strings as strings; binary and fixed-size binary as "0x"-prefixed
//     lowercase hex (so fixed_as: hex compares with the other modes);
//   - decimals as "<unscaled>e-<scale>";
//   - lists as arrays, structs as arrays of their fields in order, maps as
//     objects, null as null.

// renderArrowRow renders row i of rec in the canonical form.
func renderArrowRow(rec arrow.RecordBatch, i int) (string, error) {
	row, err := renderArrowValues(rec, i)
	if err != nil {
		return "", err
	}
	return marshalCanonical(row)
}

// renderArrowValues renders row i of rec as its columns in the canonical
// form, before they are marshalled.
func renderArrowValues(rec arrow.RecordBatch, i int) ([]any, error) {
	row := make([]any, rec.NumCols())
	for c := range row {
		v, err := renderArrow(rec.Column(c), i)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", rec.Schema().Field(c).Name, err)
		}
		row[c] = v
	}
	return row, nil
}

func marshalCanonical(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func intNumber(v int64) json.Number   { return json.Number(strconv.FormatInt(v, 10)) }
func uintNumber(v uint64) json.Number { return json.Number(strconv.FormatUint(v, 10)) }

func floatValue(v float64, bits int) any {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return json.Number(strconv.FormatFloat(v, 'g', -1, bits))
}

func hexValue(b []byte) string { return "0x" + hex.EncodeToString(b) }

func decimalValue(unscaled *big.Int, scale int32) string {
	return unscaled.String() + "e-" + strconv.Itoa(int(scale))
}

// renderArrow renders one Arrow value in the canonical form.
func renderArrow(col arrow.Array, i int) (any, error) {
	if col.IsNull(i) {
		return nil, nil
	}
	switch a := col.(type) {
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Int8:
		return intNumber(int64(a.Value(i))), nil
	case *array.Int16:
		return intNumber(int64(a.Value(i))), nil
	case *array.Int32:
		return intNumber(int64(a.Value(i))), nil
	case *array.Int64:
		return intNumber(a.Value(i)), nil
	case *array.Uint8:
		return uintNumber(uint64(a.Value(i))), nil
	case *array.Uint16:
		return uintNumber(uint64(a.Value(i))), nil
	case *array.Uint32:
		return uintNumber(uint64(a.Value(i))), nil
	case *array.Uint64:
		return uintNumber(a.Value(i)), nil
	case *array.Float32:
		return floatValue(float64(a.Value(i)), 32), nil
	case *array.Float64:
		return floatValue(a.Value(i), 64), nil
	case *array.String:
		return a.Value(i), nil
	case *array.LargeString:
		return a.Value(i), nil
	case *array.StringView:
		return a.Value(i), nil
	case *array.Binary:
		return hexValue(a.Value(i)), nil
	case *array.LargeBinary:
		return hexValue(a.Value(i)), nil
	case *array.BinaryView:
		return hexValue(a.Value(i)), nil
	case *array.FixedSizeBinary:
		return hexValue(a.Value(i)), nil
	case *array.Decimal128:
		return decimalValue(a.Value(i).BigInt(), a.DataType().(*arrow.Decimal128Type).Scale), nil
	case *array.Decimal256:
		return decimalValue(a.Value(i).BigInt(), a.DataType().(*arrow.Decimal256Type).Scale), nil
	case *array.Timestamp:
		v := int64(a.Value(i))
		if a.DataType().(*arrow.TimestampType).Unit == arrow.Second {
			v *= 1000 // Avro has no seconds: timestamp-millis
		}
		return intNumber(v), nil
	case *array.Date32:
		return intNumber(int64(a.Value(i))), nil
	case *array.Date64:
		return intNumber(int64(a.Value(i)) / 86_400_000), nil
	case *array.Time32:
		return intNumber(int64(a.Value(i))), nil
	case *array.Time64:
		return intNumber(int64(a.Value(i))), nil
	case *array.List:
		lo, hi := a.ValueOffsets(i)
		return renderArrowRange(a.ListValues(), int(lo), int(hi))
	case *array.LargeList:
		lo, hi := a.ValueOffsets(i)
		return renderArrowRange(a.ListValues(), int(lo), int(hi))
	case *array.FixedSizeList:
		n := int(a.DataType().(*arrow.FixedSizeListType).Len())
		return renderArrowRange(a.ListValues(), (a.Offset()+i)*n, (a.Offset()+i+1)*n)
	case *array.Map:
		lo, hi := a.ValueOffsets(i)
		keys, items := a.Keys(), a.Items()
		out := make(map[string]any, hi-lo)
		for j := int(lo); j < int(hi); j++ {
			k, err := renderArrow(keys, j)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("map key %v is not a string", k)
			}
			if out[ks], err = renderArrow(items, j); err != nil {
				return nil, err
			}
		}
		return out, nil
	case *array.Struct:
		out := make([]any, a.NumField())
		for j := range out {
			v, err := renderArrow(a.Field(j), i)
			if err != nil {
				return nil, err
			}
			out[j] = v
		}
		return out, nil
	case *array.Dictionary:
		return renderArrow(a.Dictionary(), a.GetValueIndex(i))
	case *array.Null:
		return nil, nil
	default:
		return nil, fmt.Errorf("verify cannot render Arrow type %s", col.DataType())
	}
}

func renderArrowRange(values arrow.Array, lo, hi int) (any, error) {
	out := make([]any, 0, hi-lo)
	for j := lo; j < hi; j++ {
		v, err := renderArrow(values, j)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// avroSchema is a parsed Avro schema, as much of it as rendering needs.
type avroSchema struct {
	typ      string // a primitive, "record", "array", "map", "fixed" or "union"
	logical  string
	scale    int32
	fields   []avroField
	items    *avroSchema // array items, map values
	branches []*avroSchema
}

type avroField struct {
	name   string
	schema *avroSchema
}

// parseAvroSchema parses schema text (the writer schema of a record).
func parseAvroSchema(text string) (*avroSchema, error) {
	var j any
	if err := json.Unmarshal([]byte(text), &j); err != nil {
		return nil, fmt.Errorf("parsing the writer schema: %w", err)
	}
	return parseAvroNode(j, "", map[string]*avroSchema{})
}

func parseAvroNode(j any, ns string, named map[string]*avroSchema) (*avroSchema, error) {
	switch n := j.(type) {
	case string:
		switch n {
		case "null", "boolean", "int", "long", "float", "double", "bytes", "string":
			return &avroSchema{typ: n}, nil
		}
		for _, name := range []string{n, ns + "." + n} {
			if s, ok := named[name]; ok {
				return s, nil
			}
		}
		return nil, fmt.Errorf("unknown Avro type %q", n)
	case []any:
		u := &avroSchema{typ: "union"}
		for _, b := range n {
			s, err := parseAvroNode(b, ns, named)
			if err != nil {
				return nil, err
			}
			u.branches = append(u.branches, s)
		}
		return u, nil
	case map[string]any:
		typ, _ := n["type"].(string)
		s := &avroSchema{typ: typ}
		s.logical, _ = n["logicalType"].(string)
		if sc, ok := n["scale"].(float64); ok {
			s.scale = int32(sc)
		}
		name, _ := n["name"].(string)
		if nsp, ok := n["namespace"].(string); ok {
			ns = nsp
		}
		if name != "" {
			full := name
			if !strings.Contains(name, ".") && ns != "" {
				full = ns + "." + name
			}
			named[full], named[name] = s, s
		}
		switch typ {
		case "record":
			fs, _ := n["fields"].([]any)
			for _, f := range fs {
				fm, _ := f.(map[string]any)
				fname, _ := fm["name"].(string)
				fs, err := parseAvroNode(fm["type"], ns, named)
				if err != nil {
					return nil, fmt.Errorf("field %s: %w", fname, err)
				}
				s.fields = append(s.fields, avroField{name: fname, schema: fs})
			}
		case "array", "map":
			key := "items"
			if typ == "map" {
				key = "values"
			}
			it, err := parseAvroNode(n[key], ns, named)
			if err != nil {
				return nil, err
			}
			s.items = it
		case "fixed":
		default:
			if _, ok := n["type"].(string); !ok {
				return parseAvroNode(n["type"], ns, named)
			}
			inner, err := parseAvroNode(typ, ns, named)
			if err != nil {
				return nil, err
			}
			inner = &avroSchema{typ: inner.typ, logical: s.logical, scale: s.scale, fields: inner.fields, items: inner.items, branches: inner.branches}
			return inner, nil
		}
		return s, nil
	}
	return nil, fmt.Errorf("unexpected Avro schema node %T", j)
}

// field returns the schema of the record's field name.
func (s *avroSchema) field(name string) (*avroSchema, bool) {
	for _, f := range s.fields {
		if f.name == name {
			return f.schema, true
		}
	}
	return nil, false
}

// nonNull returns the union's one non-null branch (s itself when it is
// not a union).
func (s *avroSchema) nonNull() *avroSchema {
	if s.typ != "union" {
		return s
	}
	for _, b := range s.branches {
		if b.typ != "null" {
			return b
		}
	}
	return s
}

// renderRow renders the goavro-decoded record m of schema s in the
// canonical form, leaving out the fields skip says.
func (s *avroSchema) renderRow(m map[string]any, skip func(string) bool) (string, error) {
	row := make([]any, 0, len(s.fields))
	for _, f := range s.fields {
		if skip != nil && skip(f.name) {
			continue
		}
		v, err := f.schema.render(m[f.name])
		if err != nil {
			return "", fmt.Errorf("field %s: %w", f.name, err)
		}
		row = append(row, v)
	}
	return marshalCanonical(row)
}

// render renders one goavro native value of schema s in the canonical form.
func (s *avroSchema) render(v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch s.typ {
	case "union":
		// goavro wraps a non-null union value as {branch name: value}.
		w, ok := v.(map[string]any)
		if !ok || len(w) != 1 {
			return nil, fmt.Errorf("union value %T is not goavro's one-entry map", v)
		}
		for _, inner := range w {
			return s.nonNull().render(inner)
		}
	case "boolean", "string":
		return v, nil
	case "int", "long":
		return renderAvroInt(s.logical, v)
	case "float":
		if f, ok := v.(float32); ok {
			return floatValue(float64(f), 32), nil
		}
	case "double":
		if f, ok := v.(float64); ok {
			return floatValue(f, 64), nil
		}
	case "bytes", "fixed":
		if s.logical == "decimal" {
			return renderAvroDecimal(v, s.scale)
		}
		if b, ok := v.([]byte); ok {
			return hexValue(b), nil
		}
	case "record":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("record value is %T", v)
		}
		out := make([]any, len(s.fields))
		for i, f := range s.fields {
			x, err := f.schema.render(m[f.name])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.name, err)
			}
			out[i] = x
		}
		return out, nil
	case "array":
		xs, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("array value is %T", v)
		}
		out := make([]any, len(xs))
		for i, x := range xs {
			r, err := s.items.render(x)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case "map":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("map value is %T", v)
		}
		out := make(map[string]any, len(m))
		for k, x := range m {
			r, err := s.items.render(x)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s value %T (logical type %q) has no canonical form", s.typ, v, s.logical)
}

// renderAvroInt renders an int or long, which goavro may have turned into
// a time.Time (timestamps, dates) or a time.Duration (times of day).
func renderAvroInt(logical string, v any) (any, error) {
	switch x := v.(type) {
	case int32:
		return intNumber(int64(x)), nil
	case int64:
		return intNumber(x), nil
	case time.Time:
		switch logical {
		case "timestamp-millis", "local-timestamp-millis":
			return intNumber(x.UnixMilli()), nil
		case "timestamp-micros", "local-timestamp-micros":
			return intNumber(x.UnixMicro()), nil
		case "timestamp-nanos", "local-timestamp-nanos":
			return intNumber(x.UnixNano()), nil
		case "date":
			return intNumber(int64(math.Floor(float64(x.Unix()) / 86400))), nil
		}
	case time.Duration:
		switch logical {
		case "time-millis":
			return intNumber(x.Milliseconds()), nil
		case "time-micros":
			return intNumber(x.Microseconds()), nil
		}
	}
	return nil, fmt.Errorf("integer value %T with logical type %q has no canonical form", v, logical)
}

// renderAvroDecimal renders a decimal: goavro's *big.Rat, or the raw
// two's-complement bytes.
func renderAvroDecimal(v any, scale int32) (any, error) {
	switch x := v.(type) {
	case *big.Rat:
		unscaled := new(big.Rat).Mul(x, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)))
		if !unscaled.IsInt() {
			return nil, fmt.Errorf("decimal %s has more than %d decimal places", x.FloatString(int(scale)+4), scale)
		}
		return decimalValue(unscaled.Num(), scale), nil
	case []byte:
		n := new(big.Int).SetBytes(x)
		if len(x) > 0 && x[0]&0x80 != 0 {
			n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(x))))
		}
		return decimalValue(n, scale), nil
	}
	return nil, fmt.Errorf("decimal value %T has no canonical form", v)
}
