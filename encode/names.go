package encode

import (
	"fmt"
	"strings"
)

// sanitizeName maps s to an Avro name ([A-Za-z_][A-Za-z0-9_]*): every other
// character becomes '_', a leading digit gets a '_' prefix, and "" becomes "_".
// The mapping is deterministic, so the same Arrow schema always gives the
// same Avro schema.
func sanitizeName(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	b.Grow(len(s) + 1)
	if s[0] >= '0' && s[0] <= '9' {
		b.WriteByte('_')
	}
	for _, c := range s {
		if c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// sanitizeNamespace maps a topic or stream name to an Avro namespace: the
// dot-separated components are sanitised one by one, empty ones dropped.
func sanitizeNamespace(s string) string {
	var parts []string
	for p := range strings.SplitSeq(s, ".") {
		if p != "" {
			parts = append(parts, sanitizeName(p))
		}
	}
	return strings.Join(parts, ".")
}

// nameSet detects collisions among sanitised names of one record.
type nameSet struct {
	where string
	seen  map[string]string // sanitised → original
}

func newNameSet(where string) *nameSet { return &nameSet{where: where, seen: map[string]string{}} }

func (s *nameSet) add(original string) (string, error) {
	n := sanitizeName(original)
	if prev, ok := s.seen[n]; ok {
		return "", fmt.Errorf("%w: %s: columns %q and %q both become Avro field %q (rename one in the query, e.g. with AS)",
			ErrNameCollision, s.where, prev, original, n)
	}
	s.seen[n] = original
	return n, nil
}
