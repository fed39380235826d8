// Package clock is the time of a test: a fake floodgate.Clock that stands
// still until the test moves it (Advance, Set), so a test of rate limits
// decides on exact instants, runs instantly, and gives the same answers on
// every run. Every New clock starts at Epoch unless told otherwise, a
// whole hour, so window arithmetic in tests is readable. After is
// time.After on that fake time, and Timers says how many are pending, so
// a test can move the clock once the code under test waits (a
// tiers.Limiter's max_wait rules wait on a Clock with an After method).
package clock
