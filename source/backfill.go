package source

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Backfill partitioning (design.md §7): a stream's history is published by
// batch queries over half-open block spans of the block column, each the
// user's SQL wrapped as a subquery and filtered. The union of the spans'
// results is exactly the full result for any deterministic query whose
// output has the block column: no keyword surgery inside the user's SQL.

// BlockSpan is the half-open block interval [From, To).
type BlockSpan struct {
	From, To uint64
}

// Len returns the number of blocks in the span.
func (s BlockSpan) Len() uint64 {
	if s.To <= s.From {
		return 0
	}
	return s.To - s.From
}

// String returns "[from, to)".
func (s BlockSpan) String() string { return fmt.Sprintf("[%d, %d)", s.From, s.To) }

// PlanPartitions splits [from, to) into partitions: of size blocks each
// when size > 0, else into workers partitions of equal size (rounded up);
// the last one is clipped. 100 blocks with size 30 are 30, 30, 30 and 10.
func PlanPartitions(from, to uint64, workers int, size uint64) []BlockSpan {
	if to <= from {
		return nil
	}
	total := to - from
	if size == 0 {
		w := uint64(max(workers, 1))
		size = (total + w - 1) / w
	}
	var out []BlockSpan
	for a := from; a < to; {
		b := to
		if to-a > size {
			b = a + size
		}
		out = append(out, BlockSpan{From: a, To: b})
		a = b
	}
	return out
}

// ErrNotPartitionable marks SQL that cannot be split into backfill
// partitions.
var ErrNotPartitionable = errors.New("the query cannot be backfilled in partitions")

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// PartitionSQL returns the batch query of the span [from, to) of sql:
//
//	SELECT * FROM (<sql>) AS amp_partition
//	WHERE amp_partition.<column> >= from AND amp_partition.<column> < to
//
// after removing a trailing SETTINGS stream = … clause (StripStreamSetting).
// The caller checks that the query's output has column.
func PartitionSQL(sql, column string, from, to uint64) (string, error) {
	if !identRE.MatchString(column) {
		return "", fmt.Errorf("%w: block column %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*); "+
			"alias it in the query (… AS block) and name the alias", ErrNotPartitionable, column)
	}
	body, err := StripStreamSetting(sql)
	if err != nil {
		return "", err
	}
	// The newlines keep a trailing line comment of the user's SQL from
	// commenting out the closing parenthesis.
	return fmt.Sprintf("SELECT * FROM (\n%s\n) AS amp_partition WHERE amp_partition.%s >= %d AND amp_partition.%s < %d",
		body, column, from, column, to), nil
}

// StripStreamSetting removes a trailing top-level SETTINGS clause whose only
// setting is stream (SETTINGS stream = true), and a trailing semicolon, so
// that the query can be nested. The scan respects string literals, quoted
// identifiers and comments. A SETTINGS clause with other settings, one that
// is not at the end, or unbalanced parentheses or quotes are errors: the
// SQL is refused rather than rewritten.
func StripStreamSetting(sql string) (string, error) {
	toks, err := lexSQL(sql)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNotPartitionable, err)
	}
	end := len(toks)
	if end > 0 && toks[end-1].text == ";" {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		t := toks[i]
		if t.depth == 0 && t.word && strings.EqualFold(t.text, "settings") {
			if err := checkOnlyStream(toks[i+1 : end]); err != nil {
				return "", err
			}
			end = i
			break
		}
	}
	if end == 0 {
		return "", fmt.Errorf("%w: the query is empty", ErrNotPartitionable)
	}
	return strings.TrimSpace(sql[:toks[end-1].end]), nil
}

// checkOnlyStream checks that a SETTINGS list is `stream = <literal>`.
func checkOnlyStream(ts []sqlToken) error {
	var parts []string
	for _, t := range ts {
		parts = append(parts, t.text)
	}
	list := strings.Join(parts, " ")
	if len(ts) == 3 && ts[0].word && strings.EqualFold(ts[0].text, "stream") && ts[1].text == "=" {
		return nil
	}
	return fmt.Errorf("%w: the query ends with SETTINGS %s; only SETTINGS stream = true can be dropped for the partitions' "+
		"batch queries: remove the other settings", ErrNotPartitionable, list)
}

type sqlToken struct {
	text  string
	end   int // byte offset just after the token
	depth int // parenthesis depth before the token
	word  bool
}

// lexSQL splits sql into tokens, skipping whitespace and comments. Strings
// (single-quoted, a doubled quote escaping one) and quoted identifiers
// (double quotes or backticks) are single tokens.
func lexSQL(sql string) ([]sqlToken, error) {
	var toks []sqlToken
	depth := 0
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				i = len(sql)
			} else {
				i += j + 1
			}
		case strings.HasPrefix(sql[i:], "/*"):
			j := strings.Index(sql[i+2:], "*/")
			if j < 0 {
				return nil, fmt.Errorf("unterminated /* comment at offset %d", i)
			}
			i += 2 + j + 2
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			for {
				k := strings.IndexByte(sql[j:], c)
				if k < 0 {
					return nil, fmt.Errorf("unterminated %c quote at offset %d", c, i)
				}
				j += k + 1
				if j < len(sql) && sql[j] == c { // doubled quote: an escaped one
					j++
					continue
				}
				break
			}
			toks = append(toks, sqlToken{text: sql[i:j], end: j, depth: depth})
			i = j
		case c == '(' || c == ')':
			if c == ')' {
				depth--
				if depth < 0 {
					return nil, fmt.Errorf("unbalanced ')' at offset %d", i)
				}
			}
			toks = append(toks, sqlToken{text: sql[i : i+1], end: i + 1, depth: depth})
			if c == '(' {
				depth++
			}
			i++
		case isWordByte(c):
			j := i
			for j < len(sql) && isWordByte(sql[j]) {
				j++
			}
			toks = append(toks, sqlToken{text: sql[i:j], end: j, depth: depth, word: true})
			i = j
		default:
			toks = append(toks, sqlToken{text: sql[i : i+1], end: i + 1, depth: depth})
			i++
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%d unclosed '('", depth)
	}
	return toks, nil
}

func isWordByte(c byte) bool {
	return c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
