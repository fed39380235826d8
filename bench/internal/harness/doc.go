// Package harness is the measuring machinery shared by the bench programs
// (cmd/peers and cmd/grpcload): it starts a private redis-server (with
// testing/redistest.StartProcess) unless given one, runs a bounded
// closed-loop load with a fixed number of goroutines, records the latency
// of every operation in an allocation-free log-linear histogram, and
// measures what each operation cost the client process (heap allocations,
// CPU time) and Redis (round trips, commands, server CPU). It also owns the
// flags the programs share (Flags, ParseFlags), the Redis under test
// (OpenRedis, Env) and the interleaved rounds that end in the table (Rounds).
//
// What this package decides: how a contender is measured, identically for
// every contender in a run. A run is a warm-up (scripts loaded, connections
// dialled, nothing recorded) followed by a measured phase that ends when its
// duration passes or its operation budget is spent, whichever comes first.
// Counters are read only while no worker is running, so per-operation ratios
// (allocations, round trips) are exact for the measured phase.
package harness
