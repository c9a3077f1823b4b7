package ampsim

import (
	"fmt"
	"strings"
)

type tokKind int

const (
	tokEOF    tokKind = iota
	tokIdent          // unquoted identifier or keyword, lowercased in text
	tokQuoted         // "quoted identifier", case preserved
	tokString         // 'string'
	tokHex            // X'hex'
	tokNumber         // 123 or 1.5
	tokOp             // punctuation and operators
)

type token struct {
	kind tokKind
	text string // keyword/ident lowercased; literal content for strings
	raw  string // as written, for messages
	pos  int
}

func (t token) is(kw string) bool   { return t.kind == tokIdent && t.text == kw }
func (t token) isOp(op string) bool { return t.kind == tokOp && t.text == op }

// sqlError is a SQL parse or planning error (INVALID_ARGUMENT).
type sqlError struct{ msg string }

func (e *sqlError) Error() string { return e.msg }

func sqlErrorf(format string, args ...any) error { return &sqlError{msg: fmt.Sprintf(format, args...)} }

// lex splits SQL into tokens. It understands ” and "" escapes, X'..' binary
// literals, -- and /* */ comments.
func lex(sql string) ([]token, error) {
	var out []token
	i := 0
	for i < len(sql) {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				return nil, sqlErrorf("SQL parse error: unterminated /* comment at offset %d", i)
			}
			i += end + 4
		case (c == 'x' || c == 'X') && i+1 < len(sql) && sql[i+1] == '\'':
			s, n, err := lexQuoted(sql, i+1, '\'')
			if err != nil {
				return nil, err
			}
			out = append(out, token{kind: tokHex, text: s, raw: sql[i : i+1+n], pos: i})
			i += 1 + n
		case c == '\'':
			s, n, err := lexQuoted(sql, i, '\'')
			if err != nil {
				return nil, err
			}
			out = append(out, token{kind: tokString, text: s, raw: sql[i : i+n], pos: i})
			i += n
		case c == '"':
			s, n, err := lexQuoted(sql, i, '"')
			if err != nil {
				return nil, err
			}
			out = append(out, token{kind: tokQuoted, text: s, raw: sql[i : i+n], pos: i})
			i += n
		case isIdentStart(c):
			j := i
			for j < len(sql) && isIdentPart(sql[j]) {
				j++
			}
			out = append(out, token{kind: tokIdent, text: strings.ToLower(sql[i:j]), raw: sql[i:j], pos: i})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(sql) && (sql[j] >= '0' && sql[j] <= '9' || sql[j] == '.' || sql[j] == '_') {
				j++
			}
			if j < len(sql) && isIdentStart(sql[j]) {
				return nil, sqlErrorf("SQL parse error: invalid number %q at offset %d", sql[i:j+1], i)
			}
			out = append(out, token{kind: tokNumber, text: strings.ReplaceAll(sql[i:j], "_", ""), raw: sql[i:j], pos: i})
			i = j
		default:
			op := string(c)
			if i+1 < len(sql) {
				switch two := sql[i : i+2]; two {
				case "<=", ">=", "<>", "!=", "::", "||":
					op = two
				}
			}
			if !strings.Contains("=<>!(),.*;+-/%:|", op[:1]) {
				return nil, sqlErrorf("SQL parse error: unexpected character %q at offset %d", c, i)
			}
			out = append(out, token{kind: tokOp, text: op, raw: op, pos: i})
			i += len(op)
		}
	}
	out = append(out, token{kind: tokEOF, raw: "end of query", pos: len(sql)})
	return out, nil
}

func lexQuoted(sql string, i int, q byte) (string, int, error) {
	var sb strings.Builder
	j := i + 1
	for {
		if j >= len(sql) {
			return "", 0, sqlErrorf("SQL parse error: unterminated %c quote at offset %d", q, i)
		}
		if sql[j] == q {
			if j+1 < len(sql) && sql[j+1] == q {
				sb.WriteByte(q)
				j += 2
				continue
			}
			return sb.String(), j + 1 - i, nil
		}
		sb.WriteByte(sql[j])
		j++
	}
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentPart(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' || c == '$' }
