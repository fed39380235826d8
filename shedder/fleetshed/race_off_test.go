//go:build !race

package fleetshed_test

const raceEnabled = false
