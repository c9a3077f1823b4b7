package labels

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// Join is how rows without a label are treated.
type Join string

// The joins, the values of streams[].labels[].join.
const (
	// Inner drops the rows whose key is not in the file (the default, as
	// amp-python's label manager does); the label columns are not
	// nullable.
	Inner Join = "inner"
	// Left keeps every row; the label columns are nullable and null for a
	// row whose key is not in the file.
	Left Join = "left"
)

// Type is the type of a label column: how its cells are parsed and the
// Arrow type they become.
type Type string

// The label column types, the values of streams[].labels[].types.
const (
	// String keeps the cell as it is (Utf8); an empty cell is "".
	String Type = "string"
	// Int64 is a base-10 integer (Int64, Avro long).
	Int64 Type = "int64"
	// Float64 is a decimal number (Float64, Avro double).
	Float64 Type = "float64"
	// Bool is true or false (also 1/0, t/f, TRUE/FALSE).
	Bool Type = "bool"
	// Hex is "0x" followed by an even number of hex digits, in either case
	// (Binary, Avro bytes). "hexN" (hex20, hex32) asks for exactly N bytes
	// (FixedSizeBinary(N), Avro fixed).
	Hex Type = "hex"
)

// Config is one label file and how it is joined.
type Config struct {
	// File is the CSV file: a header line naming the columns, then one
	// line per key. Required.
	File string
	// Key is the column of the query's result to join on. Required.
	Key string
	// CSVKey is the file's column that holds the key; "" means Key.
	CSVKey string
	// Join is Inner ("" means Inner) or Left.
	Join Join
	// Columns are the file's columns to add, in this order; empty means
	// every column but the key, in the file's order.
	Columns []string
	// Types gives a column's Type; a column not named is a String.
	Types map[string]Type
}

// csvKey is the file's key column.
func (c Config) csvKey() string {
	if c.CSVKey != "" {
		return c.CSVKey
	}
	return c.Key
}

// join is the configured join, Inner when unset.
func (c Config) join() Join {
	if c.Join == "" {
		return Inner
	}
	return c.Join
}

var hexN = regexp.MustCompile(`^hex([1-9][0-9]*)$`)

// arrowType returns the Arrow type of a label column type.
func (t Type) arrowType() (arrow.DataType, error) {
	switch t {
	case "", String:
		return arrow.BinaryTypes.String, nil
	case Int64:
		return arrow.PrimitiveTypes.Int64, nil
	case Float64:
		return arrow.PrimitiveTypes.Float64, nil
	case Bool:
		return arrow.FixedWidthTypes.Boolean, nil
	case Hex:
		return arrow.BinaryTypes.Binary, nil
	}
	if m := hexN.FindStringSubmatch(string(t)); m != nil {
		n, err := strconv.Atoi(m[1])
		if err == nil && n <= 1<<16 {
			return &arrow.FixedSizeBinaryType{ByteWidth: n}, nil
		}
	}
	return nil, fmt.Errorf("type %q: want string, int64, float64, bool, hex or hexN (hex20 for a 20-byte address)", t)
}

// validate checks what can be checked without reading the file.
func (c Config) validate() error {
	var problems []string
	if strings.TrimSpace(c.File) == "" {
		problems = append(problems, "file is empty; name the CSV file to join")
	}
	if strings.TrimSpace(c.Key) == "" {
		problems = append(problems, "key is empty; name the query's column to join on")
	}
	if c.Join != "" && c.Join != Inner && c.Join != Left {
		problems = append(problems, fmt.Sprintf("join %q: want inner or left", c.Join))
	}
	for col, t := range c.Types {
		if _, err := t.arrowType(); err != nil {
			problems = append(problems, fmt.Sprintf("types.%s: %v", col, err))
		}
		if col == c.csvKey() {
			problems = append(problems, fmt.Sprintf("types.%s: the key column takes the type of the query's column %q; give no type for it", col, c.Key))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s: %w", strings.Join(problems, "; "), ErrInvalid)
	}
	return nil
}
