package encode

import (
	"errors"
	"fmt"
	"slices"
)

// CheckBackward checks that data written with the writer schema can be read
// with the reader schema under Avro schema resolution: the reader (the new
// schema) is BACKWARD compatible with the writer (the latest registered one).
// The rules are those of the Avro specification (and of the Java
// SchemaCompatibility a Confluent registry runs): a field the reader adds
// needs a default, a field the reader drops is ignored, types may only be
// promoted (int→long→float→double, string↔bytes), named types keep their
// name, fixed types their size, enums every writer symbol, and every branch a
// writer union can hold must resolve in the reader. A failure is an
// *IncompatibleError naming the field; the caller fills in Subject.
//
// Aliases and enum defaults are not read, so a reader that relies on them
// is refused although resolution would accept it; the encoder generates
// neither. TestCheckBackwardAgreesWithHamba checks the verdicts against
// hamba/avro's SchemaCompatibility, whose errors do not name the field.
func CheckBackward(reader, writer string) error {
	r, err := parseSchema(reader)
	if err != nil {
		return fmt.Errorf("parsing new schema: %w", err)
	}
	w, err := parseSchema(writer)
	if err != nil {
		return fmt.Errorf("parsing registered schema: %w", err)
	}
	if field, reason := compatible(r, w, "", map[[2]*avroType]bool{}); reason != "" {
		return &IncompatibleError{Field: field, Reason: reason}
	}
	return nil
}

const reasonNoDefault = "field added without a default"

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func describe(t *avroType) string {
	if t.kind.named() {
		return t.kind.String() + " " + t.fullName()
	}
	if t.kind == kUnion {
		return "union " + t.marshal()
	}
	return t.kind.String()
}

// promotable reports whether Avro resolution reads writer kind w as reader
// kind r.
func promotable(r, w kind) bool {
	switch w {
	case kInt:
		return r == kLong || r == kFloat || r == kDouble
	case kLong:
		return r == kFloat || r == kDouble
	case kFloat:
		return r == kDouble
	case kString:
		return r == kBytes
	case kBytes:
		return r == kString
	case kNull, kBoolean, kDouble, kRecord, kEnum, kArray, kMap, kFixed, kUnion:
		// No promotion: only the same kind reads them.
	}
	return false
}

// compatible returns ("", "") when r can read w, else the field path and the
// reason.
func compatible(r, w *avroType, path string, seen map[[2]*avroType]bool) (string, string) {
	if r.kind == kRecord && w.kind == kRecord {
		// A recursive record compared with itself further down is assumed
		// compatible (co-inductively); the pair is on the stack only while
		// it is being checked.
		key := [2]*avroType{r, w}
		if seen[key] {
			return "", ""
		}
		seen[key] = true
		defer delete(seen, key)
	}
	if w.kind == kUnion {
		for _, wb := range w.branches {
			if f, reason := compatible(r, wb, path, seen); reason != "" {
				return f, reason
			}
		}
		return "", ""
	}
	if r.kind == kUnion {
		var firstField, firstReason string
		for _, rb := range r.branches {
			f, reason := compatible(rb, w, path, seen)
			if reason == "" {
				return "", ""
			}
			if firstReason == "" || rb.kind == w.kind {
				firstField, firstReason = f, reason
			}
		}
		if firstReason != "" && firstField != path {
			return firstField, firstReason
		}
		return path, fmt.Sprintf("the registered type %s is not in the new union %s", describe(w), r.marshal())
	}
	if r.kind != w.kind {
		if promotable(r.kind, w.kind) {
			return "", ""
		}
		return path, fmt.Sprintf("type changed from %s to %s", describe(w), describe(r))
	}
	switch r.kind {
	case kRecord:
		if r.name != w.name {
			return path, fmt.Sprintf("record name changed from %s to %s", w.fullName(), r.fullName())
		}
		for _, rf := range r.fields {
			_, wf := w.field(rf.name)
			if wf == nil {
				if !rf.hasDefault {
					return joinPath(path, rf.name), reasonNoDefault
				}
				continue
			}
			if f, reason := compatible(rf.typ, wf.typ, joinPath(path, rf.name), seen); reason != "" {
				return f, reason
			}
		}
	case kEnum:
		if r.name != w.name {
			return path, fmt.Sprintf("enum name changed from %s to %s", w.fullName(), r.fullName())
		}
		for _, s := range w.symbols {
			if !slices.Contains(r.symbols, s) {
				return path, fmt.Sprintf("enum symbol %q removed", s)
			}
		}
	case kFixed:
		if r.name != w.name {
			return path, fmt.Sprintf("fixed name changed from %s to %s", w.fullName(), r.fullName())
		}
		if r.size != w.size {
			return path, fmt.Sprintf("fixed size changed from %d to %d", w.size, r.size)
		}
	case kArray:
		return compatible(r.items, w.items, path+"[]", seen)
	case kMap:
		return compatible(r.values, w.values, path+"{}", seen)
	case kNull, kBoolean, kInt, kLong, kFloat, kDouble, kBytes, kString, kUnion:
		// Same primitive kind: compatible. Unions were resolved above.
	}
	return "", ""
}

// Rule is the compatibility a new version of a subject must have with every
// version registered under it (Confluent's *_TRANSITIVE levels: a topic
// holds records of all of them, and a retraction is written in the schema of
// the row it retracts).
type Rule uint8

// Compatibility rules.
const (
	// RuleBackward: the new schema reads the data of every registered
	// version (BACKWARD_TRANSITIVE): consumers upgrade their reader schema
	// before or with the producer.
	RuleBackward Rule = iota
	// RuleFull: also every registered version reads the new schema's data
	// (FULL_TRANSITIVE): old readers keep working.
	RuleFull
)

// String returns "BACKWARD" or "FULL".
func (r Rule) String() string {
	if r == RuleFull {
		return "FULL"
	}
	return "BACKWARD"
}

// Describe says what the rule asks, for an error.
func (r Rule) Describe() string {
	if r == RuleFull {
		return "FULL (transitive): the new schema must read the data of every registered version, and every registered version must read the new schema's data"
	}
	return "BACKWARD (transitive): the new schema must read the data of every registered version"
}

// Check checks schema (the new one) against registered (one registered
// version) under the rule. A failure is an *IncompatibleError with Field,
// Reason and Rule set; the caller fills in the subject and version.
func (r Rule) Check(schema, registered string) error {
	if err := CheckBackward(schema, registered); err != nil {
		return r.named(err, "")
	}
	if r != RuleFull {
		return nil
	}
	if err := CheckBackward(registered, schema); err != nil {
		var ie *IncompatibleError
		if errors.As(err, &ie) && ie.Reason == reasonNoDefault {
			// Read the other way round, the reader's extra field is one
			// the new schema dropped.
			ie.Reason = "field dropped, and the registered version has no default for it"
		}
		return r.named(err, "the registered version cannot read the new schema's data: ")
	}
	return nil
}

func (r Rule) named(err error, prefix string) error {
	var ie *IncompatibleError
	if errors.As(err, &ie) {
		ie.Reason = prefix + ie.Reason
		ie.Rule = r.Describe()
	}
	return err
}
