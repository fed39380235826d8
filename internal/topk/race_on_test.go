//go:build race

package topk_test

// raceEnabled: allocation counts mean nothing under the race detector.
const raceEnabled = true
