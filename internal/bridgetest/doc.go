// Package bridgetest is the harness that the end-to-end tests (test/e2e,
// test/perf, test/flink, test/kstreams) share to run the real bridge
// binary: it builds ./cmd/bridge once per test process (Build, with Main in
// the package's TestMain), starts an Amp simulator (StartSim), writes the
// bridge's YAML for one stream (Stack.WriteConfig), starts `bridge run`
// with its output in a log file (Start, Proc), runs `bridge verify`
// (Verify, Stack.Verify), reads the newest committed watermark of a stream
// from the control topic (CommittedPoint) and waits until the bridge has
// committed the simulator's head (Stack.WaitCaughtUp, Stack.RequireCaughtUp).
//
// For the changelog tests (test/flink, test/kstreams), in which a Java
// consumer reads a data topic and materialises a table, it also sets the
// test up (ChangelogTest.Start, Changelog.StartRun: the tools checked with
// RequireTools, the consumer built by test/<name>/build.sh with
// StartJavaBuild, the runs' topics deleted with Stack.DeleteTopics),
// publishes with reorgs (Stack.PublishWithReorgs), runs the consumer
// (RunJava) and compares its rows with a fresh query of Amp
// (Stack.AmpRows, CanonicalRows, DiffRows, RequireSameRows and the negative
// checks RequireStaleDetected, RequireChangedRowDetected), and checks that
// README.md quotes what the tests run (README, RequireREADMEBlock). Rows
// there are canonical JSON objects, one a row: keys sorted (as
// encoding/json writes a map), numbers as written.
//
// It is test infrastructure, like internal/testenv (whose process helpers
// it uses): only tests import it, production code never does. It keeps no
// state but the binaries Build made, which Main removes.
package bridgetest
