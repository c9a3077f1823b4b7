package ampsim

import (
	"strings"
)

// AST of the SQL subset (see the package doc).

type astExpr interface{}

type colRef struct{ qual, name string }
type litNum struct{ text string }
type litStr struct{ s string }
type litHex struct{ s string }
type litBool struct{ b bool }
type litNull struct{}
type binExpr struct {
	op   string // and, or, =, !=, <, <=, >, >=
	l, r astExpr
}
type notExpr struct{ e astExpr }
type isNullExpr struct {
	e   astExpr
	not bool
}
type betweenExpr struct {
	e, lo, hi astExpr
	not       bool
}
type inExpr struct {
	e    astExpr
	list []astExpr
	not  bool
}
type funcCall struct {
	name     string
	args     []astExpr
	star     bool
	distinct bool
	window   bool
}

type selectItem struct {
	expr  astExpr
	alias string
	star  bool   // * or qual.*
	qual  string // qualifier of qual.*
}

type tableRef struct{ dataset, table, raw string }

type fromClause struct {
	table *tableRef
	sub   *query
	alias string
}

type selectStmt struct {
	distinct bool
	items    []selectItem
	from     fromClause
	where    astExpr
	groupBy  bool
	having   bool
	orderBy  bool
	limit    *uint64
	offset   bool
}

type query struct {
	branches []*selectStmt
	// streamSetting is true when SETTINGS has stream = <boolean literal true>.
	streamSetting bool
}

type parser struct {
	toks []token
	i    int
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}

func (p *parser) accept(kw string) bool {
	if p.peek().is(kw) {
		p.i++
		return true
	}
	return false
}

func (p *parser) acceptOp(op string) bool {
	if p.peek().isOp(op) {
		p.i++
		return true
	}
	return false
}

func (p *parser) expect(kw string) error {
	if !p.accept(kw) {
		return p.errExpected(strings.ToUpper(kw))
	}
	return nil
}

func (p *parser) expectOp(op string) error {
	if !p.acceptOp(op) {
		return p.errExpected("'" + op + "'")
	}
	return nil
}

func (p *parser) errExpected(what string) error {
	t := p.peek()
	return sqlErrorf("SQL parse error: expected %s, found %s at offset %d", what, describe(t), t.pos)
}

func describe(t token) string {
	if t.kind == tokEOF {
		return "end of query"
	}
	return "'" + t.raw + "'"
}

// reserved words that cannot be an implicit alias.
var reserved = map[string]bool{
	"select": true, "from": true, "where": true, "group": true, "order": true, "limit": true,
	"union": true, "settings": true, "as": true, "and": true, "or": true, "not": true, "on": true,
	"join": true, "inner": true, "left": true, "right": true, "full": true, "cross": true,
	"having": true, "offset": true, "is": true, "null": true, "in": true, "between": true,
	"distinct": true, "with": true, "window": true, "except": true, "intersect": true, "natural": true,
	"using": true, "qualify": true, "lateral": true,
}

// parseSQL parses a whole statement.
func parseSQL(sql string) (*query, error) {
	if strings.TrimSpace(sql) == "" {
		return nil, sqlErrorf("invalid query: query must contain meaningful content; the SQL is empty")
	}
	toks, err := lex(sql)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	if p.peek().kind == tokEOF {
		return nil, sqlErrorf("invalid query: query must contain meaningful content; the SQL has only comments")
	}
	if p.peek().is("with") {
		return nil, sqlErrorf("unsupported SQL: WITH (common table expressions) is not supported by the simulator; use a subquery in FROM")
	}
	if !p.peek().is("select") {
		t := p.peek()
		return nil, sqlErrorf("unsupported SQL: only SELECT queries are supported by the simulator, found %s", describe(t))
	}
	q, err := p.parseQuery()
	if err != nil {
		return nil, err
	}
	if p.accept("settings") {
		for {
			k := p.next()
			if k.kind != tokIdent && k.kind != tokQuoted {
				p.i--
				return nil, p.errExpected("a setting name")
			}
			if err := p.expectOp("="); err != nil {
				return nil, err
			}
			v := p.next()
			if strings.EqualFold(k.text, "stream") && v.kind == tokIdent && v.text == "true" {
				q.streamSetting = true
			}
			if v.kind == tokEOF {
				return nil, sqlErrorf("SQL parse error: SETTINGS %s needs a value", k.raw)
			}
			if !p.acceptOp(",") {
				break
			}
		}
	}
	p.acceptOp(";")
	if p.peek().kind != tokEOF {
		t := p.peek()
		return nil, sqlErrorf("unsupported SQL: unexpected %s at offset %d (the simulator supports SELECT … FROM … WHERE … [UNION ALL …] [SETTINGS stream = true])", describe(t), t.pos)
	}
	return q, nil
}

func (p *parser) parseQuery() (*query, error) {
	q := &query{}
	for {
		s, err := p.parseSelect()
		if err != nil {
			return nil, err
		}
		q.branches = append(q.branches, s)
		if p.peek().is("union") {
			p.next()
			if !p.accept("all") {
				return nil, sqlErrorf("unsupported SQL: UNION without ALL is not supported by the simulator; use UNION ALL")
			}
			continue
		}
		for _, kw := range []string{"except", "intersect"} {
			if p.peek().is(kw) {
				return nil, sqlErrorf("unsupported SQL: %s is not supported by the simulator", strings.ToUpper(kw))
			}
		}
		return q, nil
	}
}

func (p *parser) parseSelect() (*selectStmt, error) {
	if err := p.expect("select"); err != nil {
		return nil, err
	}
	s := &selectStmt{}
	if p.accept("distinct") {
		s.distinct = true
	} else {
		p.accept("all")
	}
	for {
		it, err := p.parseItem()
		if err != nil {
			return nil, err
		}
		s.items = append(s.items, it)
		if !p.acceptOp(",") {
			break
		}
	}
	if err := p.expect("from"); err != nil {
		return nil, err
	}
	if err := p.parseFrom(&s.from); err != nil {
		return nil, err
	}
	for _, kw := range []string{"join", "inner", "left", "right", "full", "cross", "natural"} {
		if p.peek().is(kw) {
			return nil, sqlErrorf("unsupported SQL: JOIN is not supported by the simulator; query one table (UNION ALL combines tables)")
		}
	}
	if p.peek().isOp(",") {
		return nil, sqlErrorf("unsupported SQL: a comma join (FROM a, b) is not supported by the simulator; query one table")
	}
	if p.accept("where") {
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		s.where = e
	}
	if p.accept("group") {
		if err := p.expect("by"); err != nil {
			return nil, err
		}
		s.groupBy = true
		if err := p.skipExprList(); err != nil {
			return nil, err
		}
	}
	if p.accept("having") {
		s.having = true
		if _, err := p.parseExpr(); err != nil {
			return nil, err
		}
	}
	if p.accept("order") {
		if err := p.expect("by"); err != nil {
			return nil, err
		}
		s.orderBy = true
		for {
			if _, err := p.parseExpr(); err != nil {
				return nil, err
			}
			_ = p.accept("asc") || p.accept("desc")
			if p.accept("nulls") {
				_ = p.accept("first") || p.accept("last")
			}
			if !p.acceptOp(",") {
				break
			}
		}
	}
	if p.accept("limit") {
		t := p.next()
		n, ok := parseUint(t)
		if !ok {
			p.i--
			return nil, p.errExpected("a non-negative integer after LIMIT")
		}
		s.limit = &n
	}
	if p.accept("offset") {
		s.offset = true
		if _, ok := parseUint(p.next()); !ok {
			p.i--
			return nil, p.errExpected("a non-negative integer after OFFSET")
		}
	}
	return s, nil
}

func parseUint(t token) (uint64, bool) {
	if t.kind != tokNumber {
		return 0, false
	}
	var n uint64
	for _, c := range []byte(t.text) {
		if c < '0' || c > '9' || n > (1<<64-1)/10-9 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

func (p *parser) skipExprList() error {
	for {
		if _, err := p.parseExpr(); err != nil {
			return err
		}
		if !p.acceptOp(",") {
			return nil
		}
	}
}

func (p *parser) parseItem() (selectItem, error) {
	if p.acceptOp("*") {
		return selectItem{star: true}, nil
	}
	// qual.*
	if t := p.peek(); (t.kind == tokIdent || t.kind == tokQuoted) && p.toks[p.i+1].isOp(".") && p.toks[p.i+2].isOp("*") {
		p.i += 3
		return selectItem{star: true, qual: t.text}, nil
	}
	e, err := p.parseExpr()
	if err != nil {
		return selectItem{}, err
	}
	it := selectItem{expr: e}
	alias, err := p.parseAlias()
	if err != nil {
		return selectItem{}, err
	}
	it.alias = alias
	return it, nil
}

// parseAlias parses [AS] name; "" if none.
func (p *parser) parseAlias() (string, error) {
	if p.accept("as") {
		t := p.next()
		if t.kind != tokIdent && t.kind != tokQuoted {
			p.i--
			return "", p.errExpected("an alias after AS")
		}
		return t.text, nil
	}
	if t := p.peek(); t.kind == tokQuoted || t.kind == tokIdent && !reserved[t.text] {
		p.next()
		return t.text, nil
	}
	return "", nil
}

func (p *parser) parseFrom(f *fromClause) error {
	if p.acceptOp("(") {
		if !p.peek().is("select") {
			return p.errExpected("SELECT in a subquery")
		}
		sub, err := p.parseQuery()
		if err != nil {
			return err
		}
		if err := p.expectOp(")"); err != nil {
			return err
		}
		f.sub = sub
		alias, err := p.parseAlias()
		if err != nil {
			return err
		}
		f.alias = alias
		return nil
	}
	t := p.next()
	if t.kind != tokIdent && t.kind != tokQuoted {
		p.i--
		return p.errExpected("a table name such as eth_rpc.blocks")
	}
	ref := &tableRef{raw: t.raw}
	if p.acceptOp(".") {
		u := p.next()
		if u.kind != tokIdent && u.kind != tokQuoted {
			p.i--
			return p.errExpected("a table name after '" + t.raw + ".'")
		}
		ref.dataset, ref.table, ref.raw = t.text, u.text, t.raw+"."+u.raw
		if p.peek().isOp(".") {
			return sqlErrorf("unsupported SQL: table reference %s.… has too many parts; use dataset.table or \"namespace/dataset\".table", ref.raw)
		}
	} else {
		ref.table = t.text
	}
	if p.peek().isOp("(") {
		return sqlErrorf("unsupported SQL: table function %s(…) is not supported by the simulator", t.raw)
	}
	f.table = ref
	alias, err := p.parseAlias()
	if err != nil {
		return err
	}
	f.alias = alias
	return nil
}

func (p *parser) parseExpr() (astExpr, error) { return p.parseOr() }

func (p *parser) parseOr() (astExpr, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.accept("or") {
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = binExpr{op: "or", l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseAnd() (astExpr, error) {
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.accept("and") {
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = binExpr{op: "and", l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseNot() (astExpr, error) {
	if p.accept("not") {
		e, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return notExpr{e: e}, nil
	}
	return p.parseCmp()
}

func (p *parser) parseCmp() (astExpr, error) {
	l, err := p.parsePrimary()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	if t.kind == tokOp {
		switch t.text {
		case "=", "!=", "<>", "<", "<=", ">", ">=":
			p.next()
			r, err := p.parsePrimary()
			if err != nil {
				return nil, err
			}
			op := t.text
			if op == "<>" {
				op = "!="
			}
			return binExpr{op: op, l: l, r: r}, nil
		case "+", "-", "/", "%", "||", "::":
			return nil, sqlErrorf("unsupported SQL: operator %s at offset %d is not supported by the simulator (only comparisons, AND, OR, NOT, IS NULL, IN, BETWEEN)", t.raw, t.pos)
		}
	}
	if p.accept("is") {
		not := p.accept("not")
		if !p.accept("null") {
			return nil, p.errExpected("NULL after IS")
		}
		return isNullExpr{e: l, not: not}, nil
	}
	not := false
	if p.peek().is("not") && (p.toks[p.i+1].is("in") || p.toks[p.i+1].is("between")) {
		p.next()
		not = true
	}
	switch {
	case p.accept("between"):
		lo, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if err := p.expect("and"); err != nil {
			return nil, err
		}
		hi, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		return betweenExpr{e: l, lo: lo, hi: hi, not: not}, nil
	case p.accept("in"):
		if err := p.expectOp("("); err != nil {
			return nil, err
		}
		if p.peek().is("select") {
			return nil, sqlErrorf("unsupported SQL: IN (subquery) is not supported by the simulator")
		}
		var list []astExpr
		for {
			e, err := p.parsePrimary()
			if err != nil {
				return nil, err
			}
			list = append(list, e)
			if !p.acceptOp(",") {
				break
			}
		}
		if err := p.expectOp(")"); err != nil {
			return nil, err
		}
		return inExpr{e: l, list: list, not: not}, nil
	case p.peek().is("like") || p.peek().is("ilike"):
		return nil, sqlErrorf("unsupported SQL: LIKE is not supported by the simulator")
	}
	return l, nil
}

func (p *parser) parsePrimary() (astExpr, error) {
	t := p.next()
	switch t.kind {
	case tokNumber:
		return litNum{text: t.text}, nil
	case tokString:
		return litStr{s: t.text}, nil
	case tokHex:
		return litHex{s: t.text}, nil
	case tokOp:
		switch t.text {
		case "(":
			if p.peek().is("select") {
				return nil, sqlErrorf("unsupported SQL: scalar subqueries are not supported by the simulator")
			}
			e, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			if err := p.expectOp(")"); err != nil {
				return nil, err
			}
			return e, nil
		case "-":
			n := p.next()
			if n.kind != tokNumber {
				p.i--
				return nil, p.errExpected("a number after '-'")
			}
			return litNum{text: "-" + n.text}, nil
		}
	case tokIdent:
		switch t.text {
		case "true", "false":
			return litBool{b: t.text == "true"}, nil
		case "null":
			return litNull{}, nil
		case "case", "cast", "interval", "exists":
			return nil, sqlErrorf("unsupported SQL: %s at offset %d is not supported by the simulator", strings.ToUpper(t.text), t.pos)
		}
		if reserved[t.text] {
			p.i--
			return nil, p.errExpected("an expression")
		}
		fallthrough
	case tokQuoted:
		if t.kind == tokIdent && p.peek().isOp("(") {
			return p.parseCall(t)
		}
		if p.acceptOp(".") {
			u := p.next()
			if u.kind != tokIdent && u.kind != tokQuoted {
				p.i--
				return nil, p.errExpected("a column name after '" + t.raw + ".'")
			}
			return colRef{qual: t.text, name: u.text}, nil
		}
		return colRef{name: t.text}, nil
	case tokEOF:
		// An expression is missing: reported below.
	}
	p.i--
	return nil, p.errExpected("an expression")
}

func (p *parser) parseCall(name token) (astExpr, error) {
	p.next() // (
	fc := funcCall{name: name.text}
	if p.acceptOp("*") {
		fc.star = true
	} else if !p.peek().isOp(")") {
		fc.distinct = p.accept("distinct")
		for {
			e, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			fc.args = append(fc.args, e)
			if !p.acceptOp(",") {
				break
			}
		}
	}
	if err := p.expectOp(")"); err != nil {
		return nil, err
	}
	if p.accept("over") {
		fc.window = true
		if err := p.expectOp("("); err != nil {
			return nil, err
		}
		depth := 1
		for depth > 0 {
			t := p.next()
			switch {
			case t.kind == tokEOF:
				return nil, p.errExpected("')' closing OVER (")
			case t.isOp("("):
				depth++
			case t.isOp(")"):
				depth--
			}
		}
	}
	return fc, nil
}
