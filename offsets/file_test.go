package offsets

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Environment of the helper process that TestMain runs instead of the tests.
const (
	envHelperMode = "OFFSETS_TEST_HELPER"     // "race" or "loop"
	envHelperDir  = "OFFSETS_TEST_HELPER_DIR" // FileStore directory
	envHelperID   = "OFFSETS_TEST_HELPER_ID"  // writer id
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envHelperMode); mode != "" {
		os.Exit(helperMain(mode))
	}
	os.Exit(m.Run())
}

// helperMain is a second writer process of a FileStore. "race" commits
// versions 1..N in order like raceCommits and prints "won V" for each win;
// "loop" commits successive versions forever (until killed), printing
// "committed V" after each.
func helperMain(mode string) int {
	ctx := context.Background()
	id, _ := strconv.Atoi(os.Getenv(envHelperID))
	s, err := NewFileStore(os.Getenv(envHelperDir), discardLogger())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	out := bufio.NewWriter(os.Stdout)
	defer func() {
		if err := out.Flush(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	switch mode {
	case "race":
		versions, _ := strconv.Atoi(os.Getenv("OFFSETS_TEST_HELPER_VERSIONS"))
		for v := uint64(1); v <= uint64(versions); v++ {
			cp := testCheckpoint("xproc", v, 4)
			cp.CommittedAt = cp.CommittedAt.Add(time.Duration(id))
			switch err := s.Commit(ctx, cp); {
			case err == nil:
				fmt.Fprintf(out, "won %d\n", v)
			case !isFenced(err):
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	case "loop":
		v := uint64(1)
		if cp, err := s.Load(ctx, "crashy"); err == nil {
			v = cp.Version + 1
		}
		for ; ; v++ {
			if err := s.Commit(ctx, testCheckpoint("crashy", v, int(v%8)+1)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Fprintf(os.Stdout, "committed %d\n", v)
		}
	}
	return 0
}

func TestFileStoreIgnoresHalfWrittenTempFile(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFileStore(dir, testLogger(t))
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, s.Commit(ctx, testCheckpoint("half", 1, 2)))

	// A crash mid-commit leaves a partial temporary file beside the real one.
	full, err := Marshal(testCheckpoint("half", 2, 3))
	require.NoError(t, err)
	tmp := filepath.Join(dir, ".half.checkpoint.json.tmp-123")
	require.NoError(t, os.WriteFile(tmp, full[:len(full)/2], 0o600))

	got, err := s.Load(ctx, "half")
	require.NoError(t, err)
	assert.Equal(t, testCheckpoint("half", 1, 2), got, "the half-written file is ignored")

	require.NoError(t, s.Commit(ctx, testCheckpoint("half", 2, 3)))
	got, err = s.Load(ctx, "half")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), got.Version)
	_, err = os.Stat(tmp)
	assert.ErrorIs(t, err, os.ErrNotExist, "the next commit removes the leftover")
	left, err := filepath.Glob(filepath.Join(dir, ".*tmp-*"))
	require.NoError(t, err)
	assert.Empty(t, left)
}

func TestFileStoreCorruptFile(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFileStore(dir, testLogger(t))
	require.NoError(t, err)
	path := s.CheckpointPath("bad")
	require.NoError(t, os.WriteFile(path, []byte(`{"format":1,"stream":`), 0o600))
	_, err = s.Load(t.Context(), "bad")
	require.Error(t, err)
	assert.ErrorContains(t, err, path)
	err = s.Commit(t.Context(), testCheckpoint("bad", 1, 1))
	assert.ErrorContains(t, err, "move the file away to rebuild it from Kafka", "a corrupt checkpoint is never overwritten silently")

	cp := testCheckpoint("other", 1, 1)
	b, err := Marshal(cp)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(s.CheckpointPath("mixed"), b, 0o600))
	_, err = s.Load(t.Context(), "mixed")
	assert.ErrorContains(t, err, `it holds the checkpoint of stream "other"`)
}

func TestFileStoreLockHonoursContext(t *testing.T) {
	s, err := NewFileStore(t.TempDir(), testLogger(t))
	require.NoError(t, err)
	unlock, err := s.lock(t.Context(), "held")
	require.NoError(t, err)
	defer unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	err = s.Commit(ctx, testCheckpoint("held", 1, 1))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "held by another writer of stream \"held\"")
}

func helperCmd(t *testing.T, mode, dir string, id int, extra ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelperMode+"="+mode, envHelperDir+"="+dir, envHelperID+"="+strconv.Itoa(id))
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stderr = &prefixWriter{t: t, prefix: fmt.Sprintf("helper %d: ", id)}
	return cmd
}

// TestFileStoreFencingAcrossProcesses races two child processes and this
// one on the same directory: each version is won by exactly one writer.
func TestFileStoreFencingAcrossProcesses(t *testing.T) {
	const versions = 40
	dir := t.TempDir()
	s, err := NewFileStore(dir, testLogger(t))
	require.NoError(t, err)

	type child struct {
		cmd *exec.Cmd
		out strings.Builder
	}
	children := []*child{{}, {}}
	for i, c := range children {
		c.cmd = helperCmd(t, "race", dir, i+1, "OFFSETS_TEST_HELPER_VERSIONS="+strconv.Itoa(versions))
		c.cmd.Stdout = &c.out
		require.NoError(t, c.cmd.Start())
	}
	won := raceCommits(t, []Store{s}, "xproc", versions)
	for i, c := range children {
		require.NoError(t, c.cmd.Wait(), "helper %d", i+1)
		for line := range strings.Lines(c.out.String()) {
			var v uint64
			_, err := fmt.Sscanf(line, "won %d", &v)
			require.NoError(t, err)
			won[v] = append(won[v], i+1)
		}
	}
	for v := uint64(1); v <= versions; v++ {
		assert.Len(t, won[v], 1, "version %d must have exactly one winner, got %v", v, won[v])
	}
	got, err := s.Load(t.Context(), "xproc")
	require.NoError(t, err)
	assert.Equal(t, uint64(versions), got.Version)
}

// TestFileStoreKill9DuringCommits kills a writer process with SIGKILL at
// random points of its commit loop, several times: the stored checkpoint is
// always a complete one, at least the last one the writer reported, and the
// next writer continues from it.
func TestFileStoreKill9DuringCommits(t *testing.T) {
	dir := t.TempDir()
	s, err := NewFileStore(dir, testLogger(t))
	require.NoError(t, err)
	var acked uint64
	for round := range 3 {
		cmd := helperCmd(t, "loop", dir, round)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		sc := bufio.NewScanner(stdout)
		lines := 0
		for lines < 6+round*5 && sc.Scan() {
			_, err := fmt.Sscanf(sc.Text(), "committed %d", &acked)
			require.NoError(t, err)
			lines++
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		got, err := s.Load(t.Context(), "crashy")
		require.NoError(t, err, "round %d: the checkpoint is readable after kill -9", round)
		assert.GreaterOrEqual(t, got.Version, acked, "round %d: an acknowledged commit is never lost", round)
		assert.Equal(t, testCheckpoint("crashy", got.Version, int(got.Version%8)+1), got)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func isFenced(err error) bool { return errors.Is(err, ErrFenced) }

// prefixWriter forwards a child's stderr to the test log.
type prefixWriter struct {
	t      *testing.T
	prefix string
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.t.Log(w.prefix + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
