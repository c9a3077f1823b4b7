package ampsim

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// branch is one table scan of a plan: rows of table on chain that pass every
// filter, projected to cols.
type branch struct {
	chain    *Chain
	table    *table
	unsynced bool
	filters  []boundExpr
	// post are the filters of a query around a subquery with LIMIT (the
	// backfill's partition wrapper): applied to the rows the LIMIT keeps,
	// after it, so they never change which rows it keeps.
	post []boundExpr
	cols []int // source column per output column
}

type boundExpr struct {
	e    evalExpr
	cols []int // maps the expression's column indexes to source columns
}

func (b *branch) keep(r row) bool { return allTrue(b.filters, r) }

// keepPost reports whether a row the LIMIT kept passes the filters around it.
func (b *branch) keepPost(r row) bool { return allTrue(b.post, r) }

func allTrue(fs []boundExpr, r row) bool {
	for _, f := range fs {
		v := f.e.eval(r, f.cols)
		if bv, ok := v.(bool); !ok || !bv {
			return false
		}
	}
	return true
}

// relation is a resolved (sub)query.
type relation struct {
	fields      []arrow.Field
	branches    []*branch
	nonInc      []string // non-incremental features, e.g. "COUNT(*)"
	unsupported []string // features the simulator cannot execute in batch mode
	count       bool
	limit       *uint64
	// distinct drops rows equal to one already sent (SELECT DISTINCT).
	distinct   bool
	qualifiers []string
}

// plan is a planned query.
type plan struct {
	schema        *arrow.Schema
	rel           *relation
	streamSetting bool
	// blockNumCol is the output column named _block_num, -1 if none.
	blockNumCol int
}

func (s *Server) planSQL(sql string) (*plan, error) {
	q, err := parseSQL(sql)
	if err != nil {
		return nil, err
	}
	rel, err := s.resolveQuery(q)
	if err != nil {
		return nil, err
	}
	p := &plan{rel: rel, streamSetting: q.streamSetting, schema: arrow.NewSchema(rel.fields, nil), blockNumCol: -1}
	if s.cfg.DictionaryStrings {
		p.schema = dictSchema(p.schema)
	}
	for i, f := range rel.fields {
		if f.Name == "_block_num" && p.blockNumCol < 0 {
			p.blockNumCol = i
		}
	}
	return p, nil
}

func (s *Server) resolveQuery(q *query) (*relation, error) {
	var out *relation
	for i, sel := range q.branches {
		r, err := s.resolveSelect(sel)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			out = r
			continue
		}
		if len(r.fields) != len(out.fields) {
			return nil, sqlErrorf("invalid query: UNION ALL branches have %d and %d columns; they must match", len(out.fields), len(r.fields))
		}
		for k := range r.fields {
			if !arrow.TypeEqual(r.fields[k].Type, out.fields[k].Type) {
				return nil, sqlErrorf("invalid query: UNION ALL column %d is %s in one branch and %s in another",
					k+1, out.fields[k].Type, r.fields[k].Type)
			}
			out.fields[k].Nullable = out.fields[k].Nullable || r.fields[k].Nullable
		}
		if r.count || out.count || r.limit != nil || out.limit != nil || r.distinct || out.distinct {
			out.unsupported = append(out.unsupported, "COUNT, LIMIT or DISTINCT in a UNION ALL branch")
		}
		out.branches = append(out.branches, r.branches...)
		out.nonInc = append(out.nonInc, r.nonInc...)
		out.unsupported = append(out.unsupported, r.unsupported...)
	}
	return out, nil
}

func (s *Server) resolveTable(ref *tableRef) (*branch, error) {
	if ref.dataset == "" {
		return nil, sqlErrorf("table reference resolution error: table %q has no dataset; write it as dataset.table, e.g. %s.%s or \"%s/%s\".%s",
			ref.raw, s.cfg.Dataset, ref.table, s.cfg.Namespace, s.cfg.Dataset, ref.table)
	}
	ds := ref.dataset
	if at := strings.IndexByte(ds, '@'); at >= 0 {
		ds = ds[:at]
	}
	var chain *Chain
	for _, c := range s.chains {
		if ds == c.cfg.Dataset || ds == c.cfg.Namespace+"/"+c.cfg.Dataset {
			chain = c
		}
	}
	if chain == nil {
		var names []string
		for _, c := range s.chains {
			names = append(names, c.cfg.Dataset)
		}
		return nil, sqlErrorf("table reference resolution error: dataset %q not found; known datasets: %s", ref.dataset, strings.Join(names, ", "))
	}
	t := tableDef(ref.table)
	if t == nil {
		return nil, sqlErrorf("table reference resolution error: table %q not found in dataset %q; tables: blocks, transactions, logs", ref.table, ds)
	}
	b := &branch{chain: chain, table: t}
	for _, u := range s.cfg.UnsyncedTables {
		if u == t.name && chain == s.chains[0] || u == chain.cfg.Dataset+"."+t.name {
			b.unsynced = true
		}
	}
	for i := range t.schema.NumFields() {
		if !s.isHidden(chain.cfg.Dataset, t.name, t.schema.Field(i).Name) {
			b.cols = append(b.cols, i)
		}
	}
	return b, nil
}

func (s *Server) resolveSelect(sel *selectStmt) (*relation, error) {
	var in *relation
	if sel.from.table != nil {
		b, err := s.resolveTable(sel.from.table)
		if err != nil {
			return nil, err
		}
		fields := make([]arrow.Field, len(b.cols))
		for i, c := range b.cols {
			fields[i] = b.table.schema.Field(c)
		}
		in = &relation{fields: fields, branches: []*branch{b},
			qualifiers: []string{sel.from.table.table, sel.from.table.dataset + "." + sel.from.table.table}}
	} else {
		r, err := s.resolveQuery(sel.from.sub)
		if err != nil {
			return nil, err
		}
		if r.count {
			return nil, sqlErrorf("unsupported SQL: COUNT inside a subquery is not supported by the simulator")
		}
		// A subquery with LIMIT (the backfill's partition wrapper around a
		// query with LIMIT) is evaluated whole: the LIMIT keeps its rows
		// from every synced block, then the outer WHERE filters them.
		if (r.limit != nil || r.distinct) && (sel.limit != nil || len(sel.items) != 1 || !sel.items[0].star || sel.distinct || sel.groupBy ||
			sel.having || sel.orderBy || sel.offset) {
			return nil, sqlErrorf("unsupported SQL: around a subquery with LIMIT or DISTINCT the simulator supports only SELECT * … WHERE …")
		}
		in = r
		in.qualifiers = nil
	}
	if sel.from.alias != "" {
		in.qualifiers = append(in.qualifiers, sel.from.alias)
	}
	// A WHERE around a DISTINCT subquery filters its output columns, so it
	// may filter before the DISTINCT: the rows left are the same.
	out := &relation{nonInc: in.nonInc, unsupported: in.unsupported, limit: in.limit, distinct: in.distinct}
	for _, b := range in.branches {
		out.branches = append(out.branches, &branch{chain: b.chain, table: b.table, unsynced: b.unsynced,
			filters: slices.Clone(b.filters), post: slices.Clone(b.post)})
	}
	if sel.where != nil {
		e, err := in.bind(sel.where)
		if err != nil {
			return nil, err
		}
		if e.kind() != kindBool {
			return nil, sqlErrorf("invalid query: WHERE needs a boolean condition")
		}
		for i, b := range out.branches {
			if in.limit != nil {
				b.post = append(b.post, boundExpr{e: e, cols: in.branches[i].cols})
			} else {
				b.filters = append(b.filters, boundExpr{e: e, cols: in.branches[i].cols})
			}
		}
	}
	addCol := func(k int, name string) {
		f := in.fields[k]
		if name != "" {
			f.Name = name
		}
		out.fields = append(out.fields, f)
		for i, b := range out.branches {
			b.cols = append(b.cols, in.branches[i].cols[k])
		}
	}
	for _, it := range sel.items {
		switch {
		case it.star:
			if it.qual != "" && !in.hasQualifier(it.qual) {
				return nil, sqlErrorf("invalid query: unknown table or alias %q in %s.*", it.qual, it.qual)
			}
			for k := range in.fields {
				addCol(k, "")
			}
		default:
			switch e := it.expr.(type) {
			case colRef:
				k, err := in.column(e)
				if err != nil {
					return nil, err
				}
				addCol(k, it.alias)
			case funcCall:
				if err := out.addAggregate(in, e, it.alias); err != nil {
					return nil, err
				}
			default:
				return nil, sqlErrorf("unsupported SQL: only columns, * and COUNT(*) may be selected by the simulator, not expressions")
			}
		}
	}
	if out.count && len(out.fields) != 1 {
		return nil, sqlErrorf("unsupported SQL: COUNT(*) with other columns (GROUP BY) is not supported by the simulator")
	}
	flag := func(cond bool, name string) {
		if cond {
			out.nonInc = append(out.nonInc, name)
			out.unsupported = append(out.unsupported, name)
		}
	}
	if sel.distinct {
		out.nonInc = append(out.nonInc, "DISTINCT")
		out.distinct = true
	}
	flag(sel.groupBy, "GROUP BY")
	flag(sel.having, "HAVING")
	flag(sel.orderBy, "ORDER BY")
	flag(sel.offset, "OFFSET")
	if sel.limit != nil {
		out.nonInc = append(out.nonInc, "LIMIT")
		out.limit = sel.limit
	}
	return out, nil
}

func (out *relation) addAggregate(in *relation, fc funcCall, alias string) error {
	name := alias
	switch fc.name {
	case "count":
		if fc.window {
			out.unsupported = append(out.unsupported, "window functions")
			out.nonInc = append(out.nonInc, "window functions")
		}
		if fc.star && !fc.distinct {
			if name == "" {
				name = "count(*)"
			}
			out.count = true
		} else {
			if name == "" {
				name = "count(...)"
			}
			out.unsupported = append(out.unsupported, "COUNT(expression)")
		}
		out.nonInc = append(out.nonInc, "aggregate COUNT")
		out.fields = append(out.fields, arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64})
	case "sum", "min", "max", "avg":
		if len(fc.args) != 1 {
			return sqlErrorf("invalid query: %s takes one argument", strings.ToUpper(fc.name))
		}
		c, ok := fc.args[0].(colRef)
		if !ok {
			return sqlErrorf("unsupported SQL: %s of an expression is not supported by the simulator", strings.ToUpper(fc.name))
		}
		k, err := in.column(c)
		if err != nil {
			return err
		}
		dt := in.fields[k].Type
		switch fc.name {
		case "avg":
			dt = arrow.PrimitiveTypes.Float64
		case "sum":
			if dt.ID() == arrow.UINT32 {
				dt = arrow.PrimitiveTypes.Uint64
			} else if dt.ID() == arrow.INT32 {
				dt = arrow.PrimitiveTypes.Int64
			}
		}
		if name == "" {
			name = fmt.Sprintf("%s(%s)", fc.name, c.name)
		}
		out.nonInc = append(out.nonInc, "aggregate "+strings.ToUpper(fc.name))
		out.unsupported = append(out.unsupported, strings.ToUpper(fc.name))
		out.fields = append(out.fields, arrow.Field{Name: name, Type: dt, Nullable: true})
	default:
		return sqlErrorf("unsupported SQL: function %s() is not supported by the simulator", fc.name)
	}
	return nil
}

func (r *relation) hasQualifier(q string) bool {
	for _, x := range r.qualifiers {
		if x == q {
			return true
		}
	}
	return false
}

func (r *relation) column(c colRef) (int, error) {
	if c.qual != "" && !r.hasQualifier(c.qual) {
		return 0, sqlErrorf("invalid query: unknown table or alias %q in %s.%s", c.qual, c.qual, c.name)
	}
	for k, f := range r.fields {
		if f.Name == c.name {
			return k, nil
		}
	}
	names := make([]string, len(r.fields))
	for k, f := range r.fields {
		names[k] = f.Name
	}
	return 0, sqlErrorf("invalid query: column %q not found; available columns: %s", c.name, strings.Join(names, ", "))
}

// Expression evaluation. Values are normalised to a domain per kind:
// numbers to decimal128.Num, binaries to []byte, strings, bools, timestamps
// to int64 nanoseconds.

type valKind int

const (
	kindNull valKind = iota
	kindNum
	kindBytes
	kindString
	kindBool
	kindTime
	kindOther
)

func (k valKind) String() string {
	return [...]string{"NULL", "number", "binary", "string", "boolean", "timestamp", "nested"}[k]
}

type evalExpr interface {
	eval(r row, cols []int) any
	kind() valKind
}

func kindOf(dt arrow.DataType) valKind {
	switch dt.ID() {
	case arrow.UINT64, arrow.UINT32, arrow.INT32, arrow.INT64, arrow.DECIMAL128:
		return kindNum
	case arrow.BINARY, arrow.FIXED_SIZE_BINARY:
		return kindBytes
	case arrow.STRING:
		return kindString
	case arrow.BOOL:
		return kindBool
	case arrow.TIMESTAMP:
		return kindTime
	default:
		return kindOther
	}
}

type colE struct {
	k    int
	kd   valKind
	name string
}

func (c colE) kind() valKind { return c.kd }
func (c colE) eval(r row, cols []int) any {
	v := r[cols[c.k]]
	switch x := v.(type) {
	case nil:
		return nil
	case uint64:
		return decimal128.FromU64(x)
	case uint32:
		return decimal128.FromU64(uint64(x))
	case int32:
		return decimal128.FromI64(int64(x))
	case int64:
		return decimal128.FromI64(x)
	case arrow.Timestamp:
		return int64(x)
	}
	return v
}

type constE struct {
	v  any
	kd valKind
}

func (c constE) kind() valKind       { return c.kd }
func (c constE) eval(row, []int) any { return c.v }

type logicE struct {
	op   string // and, or
	l, r evalExpr
}

func (e logicE) kind() valKind { return kindBool }
func (e logicE) eval(r row, cols []int) any {
	l, rv := e.l.eval(r, cols), e.r.eval(r, cols)
	lb, lok := l.(bool)
	rb, rok := rv.(bool)
	if e.op == "and" {
		if lok && !lb || rok && !rb {
			return false
		}
		if lok && rok {
			return true
		}
		return nil
	}
	if lok && lb || rok && rb {
		return true
	}
	if lok && rok {
		return false
	}
	return nil
}

type notE struct{ e evalExpr }

func (e notE) kind() valKind { return kindBool }
func (e notE) eval(r row, cols []int) any {
	if b, ok := e.e.eval(r, cols).(bool); ok {
		return !b
	}
	return nil
}

type isNullE struct {
	e   evalExpr
	not bool
}

func (e isNullE) kind() valKind { return kindBool }
func (e isNullE) eval(r row, cols []int) any {
	return (e.e.eval(r, cols) == nil) != e.not
}

type cmpE struct {
	op   string
	l, r evalExpr
}

func (e cmpE) kind() valKind { return kindBool }
func (e cmpE) eval(r row, cols []int) any {
	a, b := e.l.eval(r, cols), e.r.eval(r, cols)
	if a == nil || b == nil {
		return nil
	}
	c := compareValues(a, b)
	switch e.op {
	case "=":
		return c == 0
	case "!=":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	default:
		return c >= 0
	}
}

func compareValues(a, b any) int {
	switch x := a.(type) {
	case decimal128.Num:
		y := b.(decimal128.Num)
		switch {
		case x.Less(y):
			return -1
		case y.Less(x):
			return 1
		}
		return 0
	case []byte:
		return bytes.Compare(x, b.([]byte))
	case string:
		return strings.Compare(x, b.(string))
	case bool:
		y := b.(bool)
		switch {
		case x == y:
			return 0
		case !x:
			return -1
		}
		return 1
	case int64:
		y := b.(int64)
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	}
	return 0
}

// bind resolves an AST expression against the relation's columns.
func (r *relation) bind(a astExpr) (evalExpr, error) {
	switch e := a.(type) {
	case colRef:
		k, err := r.column(e)
		if err != nil {
			return nil, err
		}
		kd := kindOf(r.fields[k].Type)
		return colE{k: k, kd: kd, name: e.name}, nil
	case litBool:
		return constE{v: e.b, kd: kindBool}, nil
	case litNull:
		return constE{v: nil, kd: kindNull}, nil
	case litNum, litStr, litHex:
		return constE{v: a, kd: kindOther}, nil // typed by the comparison
	case binExpr:
		l, err := r.bind(e.l)
		if err != nil {
			return nil, err
		}
		rr, err := r.bind(e.r)
		if err != nil {
			return nil, err
		}
		if e.op == "and" || e.op == "or" {
			if !isBoolish(l) || !isBoolish(rr) {
				return nil, sqlErrorf("invalid query: %s needs boolean operands", strings.ToUpper(e.op))
			}
			return logicE{op: e.op, l: l, r: rr}, nil
		}
		return typedCmp(e.op, l, rr)
	case notExpr:
		x, err := r.bind(e.e)
		if err != nil {
			return nil, err
		}
		if !isBoolish(x) {
			return nil, sqlErrorf("invalid query: NOT needs a boolean operand")
		}
		return notE{e: x}, nil
	case isNullExpr:
		x, err := r.bind(e.e)
		if err != nil {
			return nil, err
		}
		return isNullE{e: x, not: e.not}, nil
	case betweenExpr:
		lo, err := r.bind(binExpr{op: ">=", l: e.e, r: e.lo})
		if err != nil {
			return nil, err
		}
		hi, err := r.bind(binExpr{op: "<=", l: e.e, r: e.hi})
		if err != nil {
			return nil, err
		}
		var out evalExpr = logicE{op: "and", l: lo, r: hi}
		if e.not {
			out = notE{e: out}
		}
		return out, nil
	case inExpr:
		var out evalExpr
		for _, item := range e.list {
			c, err := r.bind(binExpr{op: "=", l: e.e, r: item})
			if err != nil {
				return nil, err
			}
			if out == nil {
				out = c
			} else {
				out = logicE{op: "or", l: out, r: c}
			}
		}
		if e.not {
			out = notE{e: out}
		}
		return out, nil
	case funcCall:
		return nil, sqlErrorf("unsupported SQL: function %s() in WHERE is not supported by the simulator", e.name)
	}
	return nil, sqlErrorf("unsupported SQL: expression %T is not supported by the simulator", a)
}

func isBoolish(e evalExpr) bool { return e.kind() == kindBool || e.kind() == kindNull }

// typedCmp types untyped literals after the other operand's kind.
func typedCmp(op string, l, r evalExpr) (evalExpr, error) {
	lc, lLit := l.(constE)
	rc, rLit := r.(constE)
	switch {
	case lLit && rLit && lc.kd == kindOther && rc.kd == kindOther:
		return nil, sqlErrorf("unsupported SQL: comparing two literals is not supported by the simulator")
	case lLit && lc.kd == kindOther:
		v, err := coerce(lc.v.(astExpr), r)
		if err != nil {
			return nil, err
		}
		l = v
	case rLit && rc.kd == kindOther:
		v, err := coerce(rc.v.(astExpr), l)
		if err != nil {
			return nil, err
		}
		r = v
	}
	if l.kind() == kindNull || r.kind() == kindNull {
		return constE{v: nil, kd: kindNull}, nil
	}
	if l.kind() != r.kind() || l.kind() == kindOther {
		return nil, sqlErrorf("invalid query: cannot compare %s with %s using %s", describeExpr(l), describeExpr(r), op)
	}
	return cmpE{op: op, l: l, r: r}, nil
}

func describeExpr(e evalExpr) string {
	if c, ok := e.(colE); ok {
		return fmt.Sprintf("column %s (%s)", c.name, c.kd)
	}
	return "a " + e.kind().String() + " value"
}

// coerce turns a literal into a constant of the other operand's kind.
func coerce(lit astExpr, other evalExpr) (evalExpr, error) {
	target := other.kind()
	fail := func(what string) error {
		return sqlErrorf("invalid query: cannot compare %s with %s", describeExpr(other), what)
	}
	switch v := lit.(type) {
	case litNum:
		if target != kindNum {
			return nil, fail("number " + v.text)
		}
		n, ok := new(big.Int).SetString(v.text, 10)
		if !ok {
			return nil, sqlErrorf("unsupported SQL: number %s is not an integer (the simulator compares integers only)", v.text)
		}
		if n.BitLen() > 126 {
			return nil, sqlErrorf("invalid query: number %s is out of range", v.text)
		}
		return constE{v: decimal128.FromBigInt(n), kd: kindNum}, nil
	case litHex:
		if target != kindBytes {
			return nil, fail("binary literal X'" + v.s + "'")
		}
		b, err := hex.DecodeString(v.s)
		if err != nil {
			return nil, sqlErrorf("SQL parse error: binary literal X'%s' is not hex: %v", v.s, err)
		}
		return constE{v: b, kd: kindBytes}, nil
	case litStr:
		switch target {
		case kindString:
			return constE{v: v.s, kd: kindString}, nil
		case kindBytes:
			s := v.s
			if !strings.HasPrefix(s, "0x") && !strings.HasPrefix(s, "0X") {
				return nil, sqlErrorf("invalid query: cannot compare %s with string '%s'; write binary values as X'…' or '0x…'", describeExpr(other), s)
			}
			b, err := hex.DecodeString(s[2:])
			if err != nil {
				return nil, sqlErrorf("invalid query: '%s' is not 0x-prefixed hex: %v", s, err)
			}
			return constE{v: b, kd: kindBytes}, nil
		case kindTime:
			t, err := time.Parse(time.RFC3339Nano, v.s)
			if err != nil {
				return nil, sqlErrorf("invalid query: '%s' is not an RFC 3339 timestamp: %v", v.s, err)
			}
			return constE{v: t.UnixNano(), kd: kindTime}, nil
		case kindNull, kindNum, kindBool, kindOther:
			// Not comparable with a string literal: refused below.
		}
		return nil, fail("string '" + v.s + "'")
	}
	return nil, fail("a literal")
}
