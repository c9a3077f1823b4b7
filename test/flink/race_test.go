//go:build race

package flink

// raceEnabled: the test binary runs with the race detector, so the bridge is
// built with it too (its packages are then in the build cache already).
const raceEnabled = true
