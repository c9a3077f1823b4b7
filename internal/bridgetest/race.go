//go:build race

package bridgetest

// RaceEnabled reports whether the test binary runs with the race detector;
// a test that passes it to Build gets a bridge built the same way (its
// packages are then in the build cache already).
const RaceEnabled = true
