//go:build race

package redisstore_test

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts mean nothing under it (make test runs the allocation
// tests again without it).
const raceEnabled = true
