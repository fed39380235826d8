//go:build !race

package shedder_test

const raceEnabled = false
