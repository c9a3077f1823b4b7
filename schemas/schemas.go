package schemas

import "embed"

// FS holds every .avsc file of the package.
//
//go:embed *.avsc
var FS embed.FS

// Names of the embedded schema files.
const (
	// SourceFile is the record of the envelope's `source` field.
	SourceFile = "source.avsc"
	// WatermarkFile is the control event written when batches commit.
	WatermarkFile = "watermark.avsc"
	// UndoFile is the control event written when committed batches are
	// invalidated by a reorg or a rewind.
	UndoFile = "undo.avsc"
)

// Source returns the text of source.avsc.
func Source() string { return mustRead(SourceFile) }

// Watermark returns the text of watermark.avsc.
func Watermark() string { return mustRead(WatermarkFile) }

// Undo returns the text of undo.avsc.
func Undo() string { return mustRead(UndoFile) }

// mustRead reads an embedded file. The set of files is fixed at build time
// and checked by the tests, so a failure is a build defect.
func mustRead(name string) string {
	b, err := FS.ReadFile(name)
	if err != nil {
		panic("schemas: embedded file missing: " + name)
	}
	return string(b)
}
