package encode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// kind is an Avro schema type.
type kind uint8

const (
	kNull kind = iota
	kBoolean
	kInt
	kLong
	kFloat
	kDouble
	kBytes
	kString
	kRecord
	kEnum
	kArray
	kMap
	kFixed
	kUnion
)

var kindNames = [...]string{"null", "boolean", "int", "long", "float", "double", "bytes", "string",
	"record", "enum", "array", "map", "fixed", "union"}

func (k kind) String() string { return kindNames[k] }

func (k kind) named() bool { return k == kRecord || k == kEnum || k == kFixed }

// avroType is the package's model of an Avro schema: generated from Arrow,
// parsed from registry text, marshalled to JSON, skipped over and compared.
type avroType struct {
	kind      kind
	name      string // short name of a named type
	namespace string // namespace of a named type
	doc       string
	fields    []*avroField // record
	symbols   []string     // enum
	items     *avroType    // array
	values    *avroType    // map
	branches  []*avroType  // union
	size      int          // fixed
	logical   string
	precision int
	scale     int
}

// avroField is one field of a record.
type avroField struct {
	name       string
	typ        *avroType
	doc        string
	hasDefault bool
	def        json.RawMessage // the default as JSON; "null" for nullable fields
}

func (t *avroType) fullName() string {
	if t.namespace == "" {
		return t.name
	}
	return t.namespace + "." + t.name
}

// nullable reports whether t is a union whose first branch is null, and
// returns the other branch when the union has exactly two.
func (t *avroType) nullable() (*avroType, bool) {
	if t.kind != kUnion || len(t.branches) != 2 || t.branches[0].kind != kNull {
		return nil, false
	}
	return t.branches[1], true
}

func (t *avroType) field(name string) (int, *avroField) {
	for i, f := range t.fields {
		if f.name == name {
			return i, f
		}
	}
	return -1, nil
}

func prim(k kind) *avroType { return &avroType{kind: k} }

func optional(t *avroType) *avroType {
	if t.kind == kNull {
		return t
	}
	return &avroType{kind: kUnion, branches: []*avroType{prim(kNull), t}}
}

// marshal writes t as compact JSON with a fixed key order. A named type is
// defined at its first occurrence and referenced by full name afterwards.
func (t *avroType) marshal() string {
	var b bytes.Buffer
	t.write(&b, map[string]bool{})
	return b.String()
}

func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // a string always marshals
	b.Write(q)
}

func (t *avroType) write(b *bytes.Buffer, defined map[string]bool) {
	if t.kind.named() {
		if defined[t.fullName()] {
			writeJSONString(b, t.fullName())
			return
		}
		defined[t.fullName()] = true
	}
	switch t.kind {
	case kUnion:
		b.WriteByte('[')
		for i, br := range t.branches {
			if i > 0 {
				b.WriteByte(',')
			}
			br.write(b, defined)
		}
		b.WriteByte(']')
		return
	case kNull, kBoolean, kInt, kLong, kFloat, kDouble, kBytes, kString:
		if t.logical == "" {
			writeJSONString(b, t.kind.String())
			return
		}
		b.WriteString(`{"type":`)
		writeJSONString(b, t.kind.String())
		b.WriteString(`,"logicalType":`)
		writeJSONString(b, t.logical)
		if t.logical == "decimal" {
			fmt.Fprintf(b, `,"precision":%d,"scale":%d`, t.precision, t.scale)
		}
		b.WriteByte('}')
		return
	case kRecord, kEnum, kArray, kMap, kFixed:
		// Complex types: the JSON object below.
	}
	b.WriteString(`{"type":`)
	writeJSONString(b, t.kind.String())
	if t.kind.named() {
		b.WriteString(`,"name":`)
		writeJSONString(b, t.name)
		if t.namespace != "" {
			b.WriteString(`,"namespace":`)
			writeJSONString(b, t.namespace)
		}
	}
	if t.doc != "" {
		b.WriteString(`,"doc":`)
		writeJSONString(b, t.doc)
	}
	switch t.kind {
	case kRecord:
		b.WriteString(`,"fields":[`)
		for i, f := range t.fields {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"name":`)
			writeJSONString(b, f.name)
			b.WriteString(`,"type":`)
			f.typ.write(b, defined)
			if f.hasDefault {
				b.WriteString(`,"default":`)
				b.Write(f.def)
			}
			if f.doc != "" {
				b.WriteString(`,"doc":`)
				writeJSONString(b, f.doc)
			}
			b.WriteByte('}')
		}
		b.WriteByte(']')
	case kEnum:
		b.WriteString(`,"symbols":`)
		s, _ := json.Marshal(t.symbols) // strings always marshal
		b.Write(s)
	case kArray:
		b.WriteString(`,"items":`)
		t.items.write(b, defined)
	case kMap:
		b.WriteString(`,"values":`)
		t.values.write(b, defined)
	case kFixed:
		b.WriteString(`,"size":`)
		b.WriteString(strconv.Itoa(t.size))
		if t.logical != "" {
			b.WriteString(`,"logicalType":`)
			writeJSONString(b, t.logical)
			if t.logical == "decimal" {
				fmt.Fprintf(b, `,"precision":%d,"scale":%d`, t.precision, t.scale)
			}
		}
	case kNull, kBoolean, kInt, kLong, kFloat, kDouble, kBytes, kString, kUnion:
		// Written by the first switch, which returned.
	}
	b.WriteByte('}')
}

// parseSchema parses Avro schema JSON into the model. It resolves named
// references and namespaces as the Avro specification describes.
func parseSchema(text string) (*avroType, error) {
	var v any
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("parsing Avro schema JSON: %w", err)
	}
	p := &schemaParser{names: map[string]*avroType{}}
	return p.parse(v, "")
}

type schemaParser struct {
	names map[string]*avroType
}

var primitiveKinds = map[string]kind{"null": kNull, "boolean": kBoolean, "int": kInt, "long": kLong,
	"float": kFloat, "double": kDouble, "bytes": kBytes, "string": kString}

func splitName(name, ns string) (short, namespace string) {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[i+1:], name[:i]
	}
	return name, ns
}

func (p *schemaParser) parse(v any, ns string) (*avroType, error) {
	switch x := v.(type) {
	case string:
		if k, ok := primitiveKinds[x]; ok {
			return prim(k), nil
		}
		full := x
		if !strings.Contains(x, ".") && ns != "" {
			full = ns + "." + x
		}
		if t, ok := p.names[full]; ok {
			return t, nil
		}
		if t, ok := p.names[x]; ok {
			return t, nil
		}
		return nil, fmt.Errorf("parsing Avro schema: unknown type name %q", x)
	case []any:
		u := &avroType{kind: kUnion}
		for _, b := range x {
			bt, err := p.parse(b, ns)
			if err != nil {
				return nil, err
			}
			u.branches = append(u.branches, bt)
		}
		return u, nil
	case map[string]any:
		return p.parseObject(x, ns)
	}
	return nil, fmt.Errorf("parsing Avro schema: unexpected JSON %T", v)
}

func jsonInt(v any) int {
	if n, ok := v.(json.Number); ok {
		i, _ := n.Int64()
		return int(i)
	}
	return 0
}

func (p *schemaParser) parseObject(x map[string]any, ns string) (*avroType, error) {
	typ, ok := x["type"]
	if !ok {
		return nil, fmt.Errorf("parsing Avro schema: object without \"type\"")
	}
	ts, isString := typ.(string)
	if !isString {
		return p.parse(typ, ns)
	}
	logical, _ := x["logicalType"].(string)
	if k, ok := primitiveKinds[ts]; ok {
		t := &avroType{kind: k, logical: logical}
		if logical == "decimal" {
			t.precision, t.scale = jsonInt(x["precision"]), jsonInt(x["scale"])
		}
		return t, nil
	}
	doc, _ := x["doc"].(string)
	switch ts {
	case "record", "error", "enum", "fixed":
		name, _ := x["name"].(string)
		if name == "" {
			return nil, fmt.Errorf("parsing Avro schema: %s without a name", ts)
		}
		if explicit, ok := x["namespace"].(string); ok && !strings.Contains(name, ".") {
			ns = explicit
		}
		short, namespace := splitName(name, ns)
		t := &avroType{name: short, namespace: namespace, doc: doc, logical: logical}
		p.names[t.fullName()] = t
		switch ts {
		case "enum":
			t.kind = kEnum
			syms, _ := x["symbols"].([]any)
			for _, s := range syms {
				str, _ := s.(string)
				t.symbols = append(t.symbols, str)
			}
		case "fixed":
			t.kind = kFixed
			t.size = jsonInt(x["size"])
			if logical == "decimal" {
				t.precision, t.scale = jsonInt(x["precision"]), jsonInt(x["scale"])
			}
		default:
			t.kind = kRecord
			fields, _ := x["fields"].([]any)
			for _, fv := range fields {
				fm, ok := fv.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("parsing Avro schema: record %s: field is not an object", t.fullName())
				}
				fname, _ := fm["name"].(string)
				ft, err := p.parse(fm["type"], namespace)
				if err != nil {
					return nil, fmt.Errorf("record %s field %q: %w", t.fullName(), fname, err)
				}
				f := &avroField{name: fname, typ: ft}
				f.doc, _ = fm["doc"].(string)
				if d, ok := fm["default"]; ok {
					f.hasDefault = true
					f.def, _ = json.Marshal(d) // re-marshalling decoded JSON cannot fail
				}
				t.fields = append(t.fields, f)
			}
		}
		return t, nil
	case "array":
		it, err := p.parse(x["items"], ns)
		if err != nil {
			return nil, err
		}
		return &avroType{kind: kArray, items: it}, nil
	case "map":
		vt, err := p.parse(x["values"], ns)
		if err != nil {
			return nil, err
		}
		return &avroType{kind: kMap, values: vt}, nil
	}
	return p.parse(ts, ns)
}
