// Package clock is the time of a test: a fake floodgate.Clock that stands
// still until the test moves it (Advance, Set), so a test of rate limits
// decides on exact instants, runs instantly, and gives the same answers on
// every run. Every New clock starts at Epoch unless told otherwise, a
// whole hour, so window arithmetic in tests is readable.
package clock
