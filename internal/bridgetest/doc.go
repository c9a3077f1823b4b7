// Package bridgetest is the harness that the end-to-end tests (test/e2e,
// test/flink) share to run the real bridge binary: it builds ./cmd/bridge
// once per test process (Build, with Main in the package's TestMain),
// starts an Amp simulator (StartSim), writes the bridge's YAML for one
// stream (Stack.WriteConfig), starts `bridge run` with its output in a log
// file (Start, Proc), runs `bridge verify` (Verify), reads the newest
// committed watermark of a stream from the control topic (CommittedPoint)
// and waits until the bridge has committed the simulator's head
// (Stack.WaitCaughtUp).
//
// It is test infrastructure, like internal/testenv (whose process helpers
// it uses): only tests import it, production code never does.
package bridgetest
