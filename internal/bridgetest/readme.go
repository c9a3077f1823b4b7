package bridgetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// README returns the module's README.md.
func README(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ModuleRoot(t), "README.md"))
	require.NoError(t, err)
	return string(b)
}

// RequireREADMEBlock fails the test when readme (README) does not show text,
// without its trailing newlines, verbatim in a code block of language lang;
// what names text in the failure message ("test/flink/transactions.sql").
func RequireREADMEBlock(t testing.TB, readme, lang, text, what string) {
	t.Helper()
	block := "```" + lang + "\n" + strings.TrimRight(text, "\n") + "\n```"
	require.Contains(t, readme, block, "README.md must show %s verbatim in a ```%s block:\n%s", what, lang, block)
}
