package ampsim

import (
	"math"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// Block pruning: Amp's engine reads only the segments of the blocks a
// query's filter on the block number selects, so a backfill partition's
// batch query costs its span, not the whole table. The simulator does the
// same: the comparisons of a branch's filters between its table's block
// column (_block_num or block_num) and an integer bound the blocks it
// generates; when they are the branch's only filters its rows need no
// per-row check either.

// bounds are the blocks a branch's filters let through, inclusive.
type bounds struct {
	lo, hi    uint64
	empty     bool // an upper bound below block 0
	blockOnly bool // every filter is a block bound
}

func (b bounds) has(n uint64) bool { return !b.empty && n >= b.lo && n <= b.hi }

// blockBounds computes the branch's block bounds.
func (b *branch) blockBounds() bounds {
	bd := bounds{lo: 0, hi: math.MaxUint64, blockOnly: true}
	for _, f := range b.filters {
		if !b.narrow(&bd, f.e, f.cols) {
			bd.blockOnly = false
		}
	}
	return bd
}

// narrow applies e to bd when e is a conjunction of block bounds and
// reports whether it was one.
func (b *branch) narrow(bd *bounds, e evalExpr, cols []int) bool {
	switch x := e.(type) {
	case logicE:
		if x.op != "and" {
			return false
		}
		l := b.narrow(bd, x.l, cols)
		r := b.narrow(bd, x.r, cols)
		return l && r
	case cmpE:
		op, col, lit := x.op, x.l, x.r
		if _, ok := col.(colE); !ok {
			op, col, lit = flipOp(op), x.r, x.l
		}
		c, ok := col.(colE)
		if !ok {
			return false
		}
		k, ok := lit.(constE)
		if !ok || !b.isBlockColumn(cols[c.k]) {
			return false
		}
		n, ok := k.v.(decimal128.Num)
		if !ok {
			return false
		}
		v := n.BigInt()
		if !v.IsInt64() {
			return false
		}
		i := v.Int64()
		if i == math.MinInt64 || i == math.MaxInt64 {
			return false // keep the ±1 below exact
		}
		switch op {
		case ">=":
			bd.lo = max(bd.lo, clampU(i))
		case ">":
			bd.lo = max(bd.lo, clampU(i+1))
		case "<=":
			bd.narrowHi(i)
		case "<":
			bd.narrowHi(i - 1)
		case "=":
			bd.lo = max(bd.lo, clampU(i))
			bd.narrowHi(i)
		default:
			return false
		}
		return true
	}
	return false
}

// isBlockColumn reports whether source column i of the branch's table is
// the block number.
func (b *branch) isBlockColumn(i int) bool {
	name := b.table.schema.Field(i).Name
	return name == "_block_num" || name == "block_num"
}

func flipOp(op string) string {
	switch op {
	case "<":
		return ">"
	case "<=":
		return ">="
	case ">":
		return "<"
	case ">=":
		return "<="
	}
	return op
}

// clampU is a lower bound: negative means 0.
func clampU(i int64) uint64 { return uint64(max(i, 0)) }

// narrowHi applies the upper bound i (inclusive); a negative one lets
// nothing through.
func (b *bounds) narrowHi(i int64) {
	if i < 0 {
		b.empty = true
		return
	}
	b.hi = min(b.hi, uint64(i))
}
