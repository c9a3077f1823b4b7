// Package ops holds the bridge's operator commands as library calls with
// typed results: Rewind (retract from a block on and resume there), Verify
// (compare a stream's topic with a fresh query at Amp), Status (where a
// stream is) and Schema (the Avro schemas a stream registers). Each
// connects only to what it needs, through what its caller passes in;
// cmd/bridge prints the results.
package ops
