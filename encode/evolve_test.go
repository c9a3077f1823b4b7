package encode

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

func TestRuleCheck(t *testing.T) {
	rec := func(fields string) string {
		return `{"type":"record","name":"R","namespace":"n","fields":[` + fields + `]}`
	}
	a := `{"name":"a","type":"int"}`
	bNullable := `{"name":"b","type":["null","long"],"default":null}`
	tests := []struct {
		name             string
		schema, old      string
		backward, full   string // "" = accepted, else a part of the reason
		field, fullField string
	}{
		{name: "new nullable column", schema: rec(a + "," + bNullable), old: rec(a)},
		{name: "dropped nullable column with a default", schema: rec(a), old: rec(a + "," + bNullable)},
		{name: "dropped column without a default", schema: rec(bNullable), old: rec(a + "," + bNullable),
			full: "field dropped, and the registered version has no default for it", fullField: "a"},
		{name: "widened int to long", schema: rec(`{"name":"a","type":"long"}`), old: rec(a),
			full: "type changed from long to int", fullField: "a"},
		{name: "narrowed long to int", schema: rec(a), old: rec(`{"name":"a","type":"long"}`),
			backward: "type changed from long to int", field: "a", full: "type changed from long to int", fullField: "a"},
		{name: "new column without a default", schema: rec(a + `,{"name":"c","type":"long"}`), old: rec(a),
			backward: "field added without a default", field: "c", full: "field added without a default", fullField: "c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct {
				rule          Rule
				reason, field string
			}{{RuleBackward, tc.backward, tc.field}, {RuleFull, tc.full, tc.fullField}} {
				err := c.rule.Check(tc.schema, tc.old)
				if c.reason == "" {
					require.NoError(t, err, c.rule)
					continue
				}
				var ie *IncompatibleError
				require.ErrorAs(t, err, &ie, c.rule)
				assert.Contains(t, ie.Reason, c.reason, c.rule)
				assert.Equal(t, c.field, ie.Field, c.rule)
				assert.Equal(t, c.rule.Describe(), ie.Rule)
			}
		})
	}
}

// TestRegistryEvolveTransitive: a new version is checked against every
// registered version, not only the latest, and the refusal names the
// subject, the version, the rule and both schemas.
func TestRegistryEvolveTransitive(t *testing.T) {
	for _, b := range testenv.RegistryBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := t.Context()
			cl, err := sr.NewClient(sr.URLs(b.Addr))
			require.NoError(t, err)
			topic := testenv.UniqueName(t, "evolve")
			reg := NewRegistry(cl)
			cfg := Config{Stream: "s", Topic: topic}
			prepare := func(fields ...arrow.Field) (*Encoder, error) {
				enc := newTestEncoder(t, cfg, arrow.NewSchema(append([]arrow.Field{req("_block_num", arrow.PrimitiveTypes.Uint64)}, fields...), nil))
				return enc, reg.PrepareRule(ctx, topic, enc, RuleBackward)
			}
			// v1 has a string column c; v2 drops it (backward: fine).
			enc1, err := prepare(req("c", arrow.BinaryTypes.String))
			require.NoError(t, err)
			_, err = prepare()
			require.NoError(t, err)
			// v3 brings c back as a nullable long: it reads v2, not v1.
			_, err = prepare(opt("c", arrow.PrimitiveTypes.Int64))
			require.ErrorIs(t, err, ErrIncompatible)
			var ie *IncompatibleError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, ValueSubject(topic), ie.Subject)
			assert.Equal(t, 1, ie.Version, "the version it fails against")
			id1, _ := enc1.ValueFraming().ID()
			assert.Equal(t, id1, ie.ID)
			assert.Equal(t, "before.c", ie.Field)
			// A registry may store a schema in a form of its own (Apicurio
			// drops inherited namespaces and reorders attributes): the
			// same schema has the same Parsing Canonical Form.
			wantFP, ferr := Fingerprint(enc1.Schemas().Value)
			require.NoError(t, ferr)
			gotFP, ferr := Fingerprint(ie.Registered)
			require.NoError(t, ferr, "the registered schema in the error parses")
			assert.Equal(t, wantFP, gotFP, "the registered schema in the error is version 1's")
			assert.Contains(t, ie.New, `"long"`)
			msg := err.Error()
			for _, want := range []string{ValueSubject(topic), "BACKWARD (transitive)", "registered schema: ", "new schema: ", "against version 1"} {
				assert.Contains(t, msg, want)
			}
			vers, err := cl.SubjectVersions(ctx, ValueSubject(topic))
			require.NoError(t, err)
			assert.Len(t, vers, 2, "nothing registered")

			// The first schema again: its own id, no new version.
			again, err := prepare(req("c", arrow.BinaryTypes.String))
			require.NoError(t, err)
			assert.Equal(t, enc1.ValueFraming(), again.ValueFraming())
		})
	}
}

// TestRegistryRefusalHonoured: a registry that refuses a new version (409)
// stops a change the bridge's own checker accepts, and the refusal quotes
// it.
func TestRegistryRefusalHonoured(t *testing.T) {
	fake := srfake.NewRegistry()
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && strings.HasPrefix(req.URL.Path, "/subjects/") && strings.HasSuffix(req.URL.Path, "/versions") {
			if posts++; posts > 1 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusConflict)
				_, _ = w.Write([]byte(`{"error_code":409,"message":"FULL_TRANSITIVE: reader has no default for field x"}`))
				return
			}
		}
		fake.Handler().ServeHTTP(w, req)
	}))
	defer srv.Close()
	cl, err := sr.NewClient(sr.URLs(srv.URL))
	require.NoError(t, err)
	reg := NewRegistry(cl)
	cfg := Config{Stream: "s", Topic: "t"}
	s1 := arrow.NewSchema([]arrow.Field{req("_block_num", arrow.PrimitiveTypes.Uint64)}, nil)
	require.NoError(t, reg.PrepareRule(t.Context(), "t", newTestEncoder(t, cfg, s1), RuleBackward))
	s2 := arrow.NewSchema(append(s1.Fields(), opt("x", arrow.PrimitiveTypes.Int64)), nil)
	err = reg.PrepareRule(t.Context(), "t", newTestEncoder(t, cfg, s2), RuleBackward)
	require.ErrorIs(t, err, ErrIncompatible)
	assert.ErrorContains(t, err, "the registry refused the new schema")
	assert.ErrorContains(t, err, "FULL_TRANSITIVE: reader has no default for field x")
	assert.ErrorContains(t, err, "registered schema: ")
}
