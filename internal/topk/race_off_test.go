//go:build !race

package topk_test

const raceEnabled = false
