package health

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"runtime/pprof"
	"strings"
)

// streamLabel is the pprof label each stream's goroutines carry (and the
// goroutines they start inherit): the stacks of a stream that does not stop
// can then be told from the others', and CPU profiles split by stream.
const streamLabel = "stream"

// Labelled runs fn with the goroutine labelled as stream's (the pprof
// label "stream"); the goroutines fn starts inherit the label. Stacks finds
// them by it, and /debug/pprof/profile splits CPU by it.
func Labelled(ctx context.Context, stream string, fn func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(streamLabel, stream), fn)
}

// stackFrames bounds the frames shown of one stack.
const stackFrames = 24

// Stacks returns, for each stream of ids run under Labelled, the stacks of
// its goroutines now: each as "N goroutine(s): fn (file:line) < caller
// (file:line) < ...", innermost first, runtime frames left out, functions
// named by their package's name. It reads the goroutine profile, which
// stops the world briefly: it is for the rare stream that does not stop
// when told to, whose stacks say where it waits.
func Stacks(ids []string) map[string][]string {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return nil
	}
	return stacksIn(buf.String(), ids)
}

// stacksIn is Stacks of a goroutine profile's text (debug=1).
func stacksIn(profile string, ids []string) map[string][]string {
	// The profile's first line ("goroutine profile: total N") heads the
	// first record.
	_, prof, _ := strings.Cut(profile, "\n")
	out := map[string][]string{}
	for rec := range strings.SplitSeq(prof, "\n\n") {
		for _, id := range ids {
			if strings.Contains(rec, fmt.Sprintf(`# labels: {%q:%q`, streamLabel, id)) ||
				strings.Contains(rec, fmt.Sprintf(`, %q:%q`, streamLabel, id)) {
				out[id] = append(out[id], stackOf(rec))
			}
		}
	}
	return out
}

// stackOf condenses one record of the goroutine profile (debug=1).
func stackOf(rec string) string {
	lines := strings.Split(rec, "\n")
	count, _, _ := strings.Cut(lines[0], " @ ")
	var frames []string
	for _, l := range lines[1:] {
		f := strings.Fields(strings.TrimPrefix(l, "#"))
		if !strings.HasPrefix(l, "#\t") || len(f) < 3 {
			continue
		}
		fn, _, _ := strings.Cut(f[1], "+0x")
		fn = fn[strings.LastIndex(fn, "/")+1:] // the package's name, not its path
		if strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "runtime/pprof.") {
			continue
		}
		if len(frames) == stackFrames {
			frames = append(frames, "...")
			break
		}
		frames = append(frames, fmt.Sprintf("%s (%s)", fn, filepath.Base(f[2])))
	}
	noun := "goroutines"
	if count == "1" {
		noun = "goroutine"
	}
	return fmt.Sprintf("%s %s: %s", count, noun, strings.Join(frames, " < "))
}
