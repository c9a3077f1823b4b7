package bridgetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// RequireTools skips the test when one of cmds is not on PATH, or fails it
// when BRIDGE_TEST_REQUIRE names service (or is "all"). service is also the
// service of deploy/local/stack.sh that installs the tools; what names it
// in the failure message ("Flink").
func RequireTools(t testing.TB, service, what string, cmds ...string) {
	t.Helper()
	for _, c := range cmds {
		if _, err := exec.LookPath(c); err != nil {
			if testenv.Required(service) {
				t.Fatalf("%s not found but %s=%q requires %s: run `deploy/local/stack.sh start %s`",
					c, testenv.EnvRequire, os.Getenv(testenv.EnvRequire), what, service)
			}
			t.Skipf("%s not found: run `deploy/local/stack.sh start %s` (installs a JDK and Maven)", c, service)
		}
	}
}

// JavaBuild is the outcome of a test's build.sh (StartJavaBuild).
type JavaBuild struct {
	// Dir is the build directory; its lib/ holds the program's classpath.
	Dir string
	// Err is why the build failed.
	Err error
	// Dur is how long the build took.
	Dur time.Duration
}

// StartJavaBuild runs test/<name>/build.sh of the module in root (10
// minutes at most) in the background, and sends its outcome on the channel
// it returns: the directory the script printed, which must hold
// lib/<jar>. The script builds the Maven project of the test
// (deploy/local/mvnbuild.sh) or reuses the cached build.
func StartJavaBuild(root, name, jar string) <-chan JavaBuild {
	out := make(chan JavaBuild, 1)
	go func() {
		t0 := time.Now()
		dir, err := buildJava(root, name, jar)
		out <- JavaBuild{Dir: dir, Err: err, Dur: time.Since(t0)}
	}()
	return out
}

// buildJava runs test/<name>/build.sh and returns the directory it printed.
func buildJava(root, name, jar string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	script := "test/" + name + "/build.sh"
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, filepath.FromSlash(script)))
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", script, err, stderr.String())
	}
	dir := strings.TrimSpace(stdout.String())
	if _, err := os.Stat(filepath.Join(dir, "lib", jar)); err != nil {
		return "", fmt.Errorf("%s printed %q: %w", script, dir, err)
	}
	return dir, nil
}

// JavaProgram is how RunJava runs a Java program that StartJavaBuild built.
type JavaProgram struct {
	// Name is what failure messages call the program: "the Flink job".
	Name string
	// Dir is the build directory (JavaBuild.Dir): the classpath is its lib/.
	Dir string
	// Log4j is the program's log4j2 configuration file.
	Log4j string
	// Heap is the JVM's maximum heap (-Xmx), such as "512m".
	Heap string
	// Main is the main class.
	Main string
	// Args are the program's arguments.
	Args []string
	// SummaryPrefix starts the line of stderr whose rest is the JSON summary
	// the program prints when it succeeds: "flink-changelog summary: ".
	SummaryPrefix string
}

// JavaRun is one run of a JavaProgram, with its summary decoded into S.
type JavaRun[S any] struct {
	// Exit is the program's exit code.
	Exit int
	// Rows are the non-empty lines of its stdout, without surrounding white
	// space (none when Exit is not 0).
	Rows []string
	// Summary is its summary line decoded (the zero S when Exit is not 0).
	Summary S
	// Stderr is its stderr.
	Stderr string
	// StderrTail is the last 40 lines of Stderr, for failure messages.
	StderrTail string
	// Wall is how long the JVM ran.
	Wall time.Duration
}

// RunJava runs j (4 minutes at most) with the serial GC and a temporary
// directory of the test as java.io.tmpdir. When it exits 0, its stderr must
// have the summary line, which is decoded into Summary, and its stdout lines
// are Rows. It fails the test when java cannot run.
func RunJava[S any](ctx context.Context, t testing.TB, j JavaProgram) JavaRun[S] {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	args := []string{
		"-Xmx" + j.Heap, "-XX:+UseSerialGC",
		"-Dlog4j2.configurationFile=" + j.Log4j,
		"-Djava.io.tmpdir=" + t.TempDir(),
		"-cp", filepath.Join(j.Dir, "lib") + string(os.PathListSeparator) + filepath.Join(j.Dir, "lib", "*"),
		j.Main,
	}
	cmd := exec.CommandContext(ctx, "java", append(args, j.Args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err, "running %s", j.Name)
	}
	r := JavaRun[S]{Exit: cmd.ProcessState.ExitCode(), Stderr: stderr.String(), Wall: time.Since(t0)}
	r.StderrTail = LastLines(r.Stderr, 40)
	if r.Exit != 0 {
		return r
	}
	summary := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(j.SummaryPrefix) + `(\{.*\})$`)
	m := summary.FindStringSubmatch(r.Stderr)
	require.NotNil(t, m, "no summary line from %s; stderr tail:\n%s", j.Name, r.StderrTail)
	require.NoError(t, json.Unmarshal([]byte(m[1]), &r.Summary))
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			r.Rows = append(r.Rows, l)
		}
	}
	require.NoError(t, sc.Err())
	return r
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
