package bridgetest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// Proc is one running `bridge run` process. Exited, Err, Kill9 and Term
// (SIGTERM, then SIGKILL after a grace period) come from testenv.Process.
type Proc struct {
	*testenv.Process
	// Log is the file that holds the process's stdout and stderr.
	Log string
	// Started is when the process was started.
	Started time.Time
}

// Start starts `bin run -c cfg` with the environment Env, its output
// appended to the file logPath. The test's cleanup kills it (SIGKILL) if it
// still runs.
func Start(t testing.TB, bin, cfg, logPath string) *Proc {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), bin, "run", "-c", cfg)
	cmd.Env = Env()
	pr, err := testenv.StartProcess(cmd, logPath)
	if err != nil {
		t.Fatalf("bridge run: %v", err)
	}
	p := &Proc{Process: pr, Log: logPath, Started: time.Now()}
	t.Cleanup(p.Kill9)
	return p
}

// Tail returns the last n lines of the process's log, for failure messages.
func (p *Proc) Tail(n int) string { return testenv.Tail(p.Log, n) }

// Env is the environment of bridge processes: the test's, without BRIDGE_
// variables that would override the YAML file.
func Env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BRIDGE_") {
			out = append(out, kv)
		}
	}
	return out
}

// Verify runs `bin verify -c cfg -stream stream` (2 minutes at most) with
// the environment Env, and returns its exit code and its output (stdout,
// then stderr). It fails the test when the command cannot run.
func Verify(t testing.TB, bin, cfg, stream string) (exit int, out string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "verify", "-c", cfg, "-stream", stream)
	cmd.Env = Env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running bridge verify: %v", err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String() + stderr.String()
}
