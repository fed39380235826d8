//go:build race

package guard

// raceEnabled: allocation counts mean nothing under the race detector
// (sync.Pool drops items at random).
const raceEnabled = true
