package config

import (
	"reflect"
	"strconv"
	"strings"
)

// schemaKey is one key of the schema: its YAML path (streams[].x for a
// stream key) and the Go type of its value.
type schemaKey struct {
	path string
	typ  reflect.Type
	// leaf is false for a section (a struct: kafka.tls).
	leaf bool
	// inList is true for a key inside a list of sections other than
	// streams (streams[].labels[].file): the YAML file sets it, the
	// environment and -set flags cannot.
	inList bool
}

// yamlName returns the YAML key of a struct field, or "" for a field no
// YAML key reaches (yaml:"-", secrets).
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	return name
}

var streamsType = reflect.TypeFor[[]StreamConfig]()

// schemaKeys lists every key of the schema, sections included, derived from
// the yaml tags of Config: the one list the loader, the -set and
// environment checks, and the tests compare against.
func schemaKeys() []schemaKey {
	var out []schemaKey
	var walk func(t reflect.Type, prefix string, inList bool)
	walk = func(t reflect.Type, prefix string, inList bool) {
		for i := range t.NumField() {
			f := t.Field(i)
			name := yamlName(f)
			if name == "" {
				continue
			}
			path := name
			if prefix != "" {
				path = prefix + "." + name
			}
			switch {
			case f.Type == streamsType:
				out = append(out, schemaKey{path: path, typ: f.Type})
				walk(f.Type.Elem(), path+"[]", inList)
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
				out = append(out, schemaKey{path: path, typ: f.Type, inList: inList})
				walk(f.Type.Elem(), path+"[]", true)
			case f.Type.Kind() == reflect.Struct:
				out = append(out, schemaKey{path: path, typ: f.Type, inList: inList})
				walk(f.Type, path, inList)
			default:
				out = append(out, schemaKey{path: path, typ: f.Type, leaf: true, inList: inList})
			}
		}
	}
	walk(reflect.TypeFor[Config](), "", false)
	return out
}

// leafPaths returns the leaf keys that the environment and -set flags can
// set, as dotted paths with the stream index written as idx (streams.0.sql
// for idx "0"); keys inside a list (streams[].labels[]) are not among them.
func leafPaths(idx string) []string {
	var out []string
	for _, k := range schemaKeys() {
		if k.leaf && !k.inList {
			out = append(out, strings.ReplaceAll(k.path, "[]", "."+idx))
		}
	}
	return out
}

// normalizePath turns streams[0].sql, streams.0.sql and STREAMS_0_SQL-style
// paths into the dotted form streams.0.sql, and returns the stream index
// ("" when the path is not under streams).
func normalizePath(p string) (string, string) {
	p = strings.TrimSpace(p)
	p = strings.NewReplacer("[", ".", "]", "").Replace(p)
	parts := strings.Split(p, ".")
	if len(parts) > 1 && parts[0] == "streams" {
		if _, err := strconv.Atoi(parts[1]); err == nil {
			return p, parts[1]
		}
	}
	return p, ""
}

// closest returns the candidate nearest to s by edit distance, or "" when
// none is near enough to be a likely typo.
func closest(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		if d := editDistance(s, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD > max(3, len(s)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// didYouMean formats the suggestion for an unknown key.
func didYouMean(s string) string {
	if s == "" {
		return ""
	}
	return "; did you mean " + s + "?"
}
