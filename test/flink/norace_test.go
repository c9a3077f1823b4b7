//go:build !race

package flink

// raceEnabled: the test binary runs without the race detector, and so does
// the bridge it builds.
const raceEnabled = false
