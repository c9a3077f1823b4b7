package bridgetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// builds are the binaries Build made in this test process, one per race
// mode, in dir; Main removes dir.
var builds struct {
	sync.Mutex
	main bool
	dir  string
	bins map[bool]built
}

type built struct {
	path string
	dur  time.Duration
	err  error
}

// Main runs the tests of a package that uses Build and then removes the
// binaries Build made. Call it from the package's TestMain:
//
//	func TestMain(m *testing.M) { bridgetest.Main(m) }
func Main(m *testing.M) {
	builds.Lock()
	builds.main = true
	builds.Unlock()
	code := m.Run()
	builds.Lock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
	}
	builds.Unlock()
	os.Exit(code)
}

// ModuleRoot returns the directory of go.mod: the test's working directory
// (its package directory) or the nearest one above it.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("module root: %v", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			t.Fatalf("the test must run inside the module: no go.mod in %s or above", wd)
		}
	}
}

// Build returns the bridge binary built from ./cmd/bridge, with the race
// detector when race is set (RaceEnabled: as the test binary). It builds
// once per test process and race mode, and logs the build time; the
// package's TestMain must call Main, which removes the binaries.
func Build(t testing.TB, race bool) string {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	if !builds.main {
		t.Fatal("bridgetest.Build needs the package's TestMain to call bridgetest.Main (which removes the binary)")
	}
	b, ok := builds.bins[race]
	if !ok {
		b = build(ModuleRoot(t), race)
		if builds.bins == nil {
			builds.bins = map[bool]built{}
		}
		builds.bins[race] = b
		if b.err == nil {
			t.Logf("built bridge (race detector %v) in %s", race, b.dur.Round(time.Millisecond))
		}
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// build builds ./cmd/bridge of the module in root into builds.dir (made on
// first use); the caller holds builds.
func build(root string, race bool) built {
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "bridgetest-")
		if err != nil {
			return built{err: fmt.Errorf("building ./cmd/bridge: %w", err)}
		}
		builds.dir = dir
	}
	name := "bridge"
	if race {
		name = "bridge-race"
	}
	out := filepath.Join(builds.dir, name)
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/bridge")...)
	cmd.Dir = root
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		return built{err: fmt.Errorf("building ./cmd/bridge: %w\n%s", err, b)}
	}
	return built{path: out, dur: time.Since(start)}
}
