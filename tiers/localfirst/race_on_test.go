//go:build race

package localfirst_test

// raceEnabled: the race detector slows every memory access tenfold or
// more, so a benchmark's figures mean nothing under it; make test runs
// each benchmark once under it only to keep the code from rotting, and
// the benchmarks skip the sizes that take their setup seconds there.
const raceEnabled = true
