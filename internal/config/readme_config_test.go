package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestREADMEMinimalConfigIsValid loads the README's "A minimal bridge.yaml"
// with the real loader (unknown keys are errors), so the README cannot
// show keys or values the bridge refuses.
func TestREADMEMinimalConfigIsValid(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	const marker = "A minimal `bridge.yaml`:"
	_, rest, ok := strings.Cut(string(readme), marker)
	require.True(t, ok, "README has no %q", marker)
	rest, ok = strings.CutPrefix(strings.TrimLeft(rest, "\n"), "```yaml\n")
	require.True(t, ok, "no yaml block right after %q", marker)
	block, _, ok := strings.Cut(rest, "```")
	require.True(t, ok, "unterminated yaml block after %q", marker)

	path := filepath.Join(t.TempDir(), "bridge.yaml")
	require.NoError(t, os.WriteFile(path, []byte(block), 0o600))
	cfg, err := LoadConfig(path, func(string) (string, bool) { return "", false })
	require.NoError(t, err, "the README's minimal bridge.yaml:\n%s", block)
	require.Len(t, cfg.Streams, 1)
	require.Equal(t, KeyMode("row"), cfg.Streams[0].Key)
	require.Equal(t, []string{"tx_hash"}, cfg.Streams[0].KeyColumns)
}

// readmeRow is one row of the README's configuration table.
type readmeRow struct {
	keys []string
	def  string
}

var backticked = regexp.MustCompile("`([^`]*)`")

// expandKey expands a{b,c} into ab, ac.
func expandKey(k string) []string {
	pre, rest, ok := strings.Cut(k, "{")
	if !ok {
		return []string{k}
	}
	alts, post, _ := strings.Cut(rest, "}")
	var out []string
	for _, a := range strings.Split(alts, ",") {
		out = append(out, expandKey(pre+a+post)...)
	}
	return out
}

func readmeTable(t *testing.T) []readmeRow {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(readme), "| key | default | meaning |\n| --- | --- | --- |\n")
	require.True(t, ok, "README has no configuration table")
	var rows []readmeRow
	for line := range strings.Lines(rest) {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), " | ")
		require.GreaterOrEqual(t, len(cells), 3, "row %q", line)
		var r readmeRow
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			r.keys = append(r.keys, expandKey(m[1])...)
		}
		r.def = strings.TrimSpace(cells[1])
		rows = append(rows, r)
	}
	require.NotEmpty(t, rows)
	return rows
}

// defaultValue returns the value a key has when nothing configures it.
func defaultValue(t *testing.T, key string) reflect.Value {
	t.Helper()
	c := Config{Streams: []StreamConfig{{}}}
	c.Defaults()
	v := reflect.ValueOf(&c).Elem()
	for _, part := range strings.Split(strings.ReplaceAll(key, "[]", ""), ".") {
		f, ok := fieldByYAML(v.Type(), part)
		require.True(t, ok, "README key %s is not in the schema", key)
		v = v.FieldByIndex(f.Index)
		switch {
		case v.Type() == streamsType:
			v = v.Index(0)
		case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
			// A list of sections (streams[].labels): its element's defaults.
			v = reflect.New(v.Type().Elem()).Elem()
		}
	}
	return v
}

// TestREADMEConfigTable: every key of the README's table is a key of the
// schema, every key of the schema is in the table, and each default the
// table gives as a literal (`30s`) is the one the code uses; "—" and "off"
// mean the zero value, other prose is not checked.
func TestREADMEConfigTable(t *testing.T) {
	leaves := map[string]bool{}
	for _, k := range schemaKeys() {
		if k.leaf {
			leaves[k.path] = true
		}
	}
	inTable := map[string]bool{}
	for _, r := range readmeTable(t) {
		require.NotEmpty(t, r.keys)
		var defs []string
		for _, m := range backticked.FindAllStringSubmatch(r.def, -1) {
			defs = append(defs, m[1])
		}
		literal := strings.HasPrefix(r.def, "`")
		if literal {
			require.Len(t, defs, len(r.keys), "row %v: give one default per key", r.keys)
		}
		for i, k := range r.keys {
			assert.True(t, leaves[k], "README key %s is no key of the schema", k)
			if !leaves[k] {
				continue
			}
			inTable[k] = true
			v := defaultValue(t, k)
			switch {
			case literal:
				want := reflect.New(v.Type()).Elem()
				require.NoError(t, setFromString(want, defs[i]), "README default of %s", k)
				assert.Equal(t, want.Interface(), v.Interface(), "README default of %s", k)
			case r.def == "—" || r.def == "off":
				assert.True(t, v.IsZero(), "README says %s has no default, the code uses %v", k, v.Interface())
			}
		}
	}
	for k := range leaves {
		assert.True(t, inTable[k], "schema key %s is missing from the README's configuration table", k)
	}
}
