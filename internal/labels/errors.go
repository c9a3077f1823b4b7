package labels

import (
	"errors"
	"fmt"
)

// ErrInvalid marks a label configuration or file the stream cannot run
// with: a missing or malformed file, a duplicate key, a key column the query
// lacks or whose type cannot be joined. Retrying cannot fix it.
var ErrInvalid = errors.New("invalid labels")

// CellError names a malformed cell of a label file.
type CellError struct {
	// File is the CSV file's path.
	File string
	// Line is the cell's line in the file (1 is the header).
	Line int
	// Column is the cell's column name.
	Column string
	// Value is the cell's text.
	Value string
	// Reason says what is wrong and what is expected.
	Reason string
}

// Error implements error.
func (e *CellError) Error() string {
	return fmt.Sprintf("label file %s line %d column %q: value %q: %s", e.File, e.Line, e.Column, e.Value, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *CellError) Unwrap() error { return ErrInvalid }
