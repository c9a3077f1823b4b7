package source

import (
	"fmt"
	"slices"
	"strings"
)

// SplitHazards returns the features of sql that make one row of its result
// depend on the rows of other blocks, in the order they appear: aggregate
// functions without GROUP BY, a GROUP BY whose keys do not include the
// block column (named column), DISTINCT, LIMIT, OFFSET, FETCH and window
// functions (OVER). Such a query cannot be split into block spans: each
// partition's batch query computes it again over whatever Amp has synced
// at that moment (the union of partitions is exactly the full result only
// while the tables do not change, and only for a deterministic LIMIT), and
// Amp refuses to stream it. The amp-python SDK splits such queries anyway
// and returns one wrong answer per partition (seed "parallel streaming").
//
// The scan is lexical (strings, quoted identifiers and comments are
// respected) and looks at every nesting level; a GROUP BY that includes the
// block column makes the query's aggregates per block, and so safe. It
// errs on the side of naming a feature: a GROUP BY by ordinal (GROUP BY 1)
// counts as one of another column.
func SplitHazards(sql, column string) ([]string, error) {
	toks, err := lexSQL(sql)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotPartitionable, err)
	}
	var out, aggs []string
	add := func(list *[]string, s string) {
		if !slices.Contains(*list, s) {
			*list = append(*list, s)
		}
	}
	grouped := false
	next := func(i int) string {
		if i+1 < len(toks) {
			return strings.ToLower(toks[i+1].text)
		}
		return ""
	}
	for i, t := range toks {
		if !t.word {
			continue
		}
		w := strings.ToLower(t.text)
		switch {
		case w == "distinct":
			add(&out, "DISTINCT")
		case w == "limit", w == "offset":
			add(&out, strings.ToUpper(w))
		case w == "fetch" && (next(i) == "first" || next(i) == "next"):
			add(&out, "FETCH")
		case w == "over" && (next(i) == "(" || i+1 < len(toks) && toks[i+1].word):
			add(&out, "window functions (OVER)")
		case w == "group" && next(i) == "by":
			grouped = true
			keys := groupKeys(toks[i+2:], t.depth)
			if !slices.ContainsFunc(keys, func(k string) bool { return isColumn(k, column) }) {
				add(&out, "GROUP BY "+strings.Join(keys, ", "))
			}
		case aggregateFuncs[w] && next(i) == "(":
			add(&aggs, strings.ToUpper(w)+"(…)")
		}
	}
	if !grouped {
		out = append(out, aggs...)
	}
	return out, nil
}

// groupKeys returns the GROUP BY keys in toks (the tokens after GROUP BY at
// depth d) as written, up to the clause's end.
func groupKeys(toks []sqlToken, d int) []string {
	var keys []string
	var cur []string
	for _, t := range toks {
		if t.depth < d || t.depth == d && (t.text == ")" || t.text == ";" ||
			t.word && groupEnd[strings.ToLower(t.text)]) {
			break
		}
		if t.depth == d && t.text == "," {
			keys = append(keys, strings.Join(cur, " "))
			cur = nil
			continue
		}
		cur = append(cur, t.text)
	}
	if len(cur) > 0 {
		keys = append(keys, strings.Join(cur, " "))
	}
	return keys
}

// isColumn reports whether the GROUP BY key k is the column col, bare,
// qualified (t.col) or quoted ("col").
func isColumn(k, col string) bool {
	if j := strings.LastIndexByte(k, '.'); j >= 0 && !strings.HasPrefix(k, `"`) {
		k = k[j+1:]
	}
	if unq, ok := strings.CutPrefix(k, `"`); ok {
		return strings.TrimSuffix(unq, `"`) == col
	}
	return strings.EqualFold(k, col)
}

// groupEnd are the words that end a GROUP BY clause.
var groupEnd = map[string]bool{"having": true, "order": true, "limit": true, "offset": true, "fetch": true, "union": true,
	"except": true, "intersect": true, "settings": true, "window": true, "qualify": true}

// aggregateFuncs are DataFusion's aggregate functions (a row of theirs
// depends on many rows) by lower-case name.
var aggregateFuncs = map[string]bool{
	"count": true, "sum": true, "min": true, "max": true, "avg": true, "mean": true, "median": true,
	"array_agg": true, "string_agg": true, "approx_distinct": true, "approx_median": true,
	"approx_percentile_cont": true, "approx_percentile_cont_with_weight": true,
	"bit_and": true, "bit_or": true, "bit_xor": true, "bool_and": true, "bool_or": true,
	"corr": true, "covar": true, "covar_pop": true, "covar_samp": true,
	"stddev": true, "stddev_pop": true, "stddev_samp": true, "var": true, "var_pop": true, "var_samp": true, "variance": true,
	"first_value": true, "last_value": true, "nth_value": true, "grouping": true,
	"regr_slope": true, "regr_intercept": true, "regr_count": true, "regr_r2": true,
	"regr_avgx": true, "regr_avgy": true, "regr_sxx": true, "regr_syy": true, "regr_sxy": true,
}
