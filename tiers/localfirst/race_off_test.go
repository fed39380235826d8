//go:build !race

package localfirst_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
