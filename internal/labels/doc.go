// Package labels joins reference data from CSV files onto a stream's Arrow
// record batches by a key column (streams[].labels): token symbols and
// decimals onto transfers by the token's address, for example. It is the
// bridge's counterpart of amp-python's label manager, without its pitfalls:
//
//   - Hex columns are declared, never guessed from a column's name or from
//     its first value: a key joined to a FixedSizeBinary(n) column must be
//     "0x" (or "0X") followed by exactly 2n hex digits, in either case; a
//     value column typed hex or hexN is checked the same way. A malformed
//     cell is an error naming the file, its line and its column.
//   - A key that appears twice in a file is refused (an inner join would
//     silently duplicate rows), and so is an empty key cell.
//   - A label column whose name is already a column of the query, or of an
//     earlier label file, is refused instead of being dropped or renamed.
//   - The join keeps the batch's row order and all of its rows (pyarrow's
//     join reorders rows, and amp-python kept only the first chunk of the
//     joined table), and it runs on live and backfill batches alike
//     (amp-python ignores label_config while streaming).
//
// Inner joins (the default, as in amp-python) drop the rows whose key is not
// in the file, and their label columns are not nullable; left joins keep
// every row and add nullable label columns, null where the key is unknown
// (or null). Several files are applied in order, each with its own key and
// join.
//
// The files are read once (Load); a Set is immutable and safe for
// concurrent use, and so is a Joiner. The join looks each row's key up in
// a hash map keyed by the key's bytes (no allocation per row) and builds
// the output columns with Arrow's take kernel, one allocation per column
// per batch.
package labels
