//go:build !race

package tiers_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
