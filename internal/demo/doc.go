// Package demo is the engine behind `floodgate demo`: it starts an HTTP and a
// gRPC service in-process, protected by the whole floodgate chain, drives
// mixed traffic at them from bounded loops, and reports what each tenant
// tier and priority met (a text table and a self-contained HTML page).
//
// What it decides: the demo's traffic mix and its policy are fixed (see
// policy.yaml and Scenario) so runs are comparable; only the duration, the
// store (in-process, or Redis when a URL is given) and an optional Redis
// fault change.
//
// The main run's services build on package guard, as a service would:
// the embedded policy (its rules and its shedder:, concurrency: and
// identity: sections, guard.WithPolicy), the store in process or in
// Redis behind the fallback (a fleet of one: the demo holds every limit
// whole), and the one chain in front of the HTTP and the gRPC service.
// The report draws each state change of the fallback's circuit breaker
// when it happens (guard.WithOnBreakerChange) and quotes the fallback's
// counters (Guard.Fallback, fallback.Stats); each run keeps its buckets
// and its fleet under a key prefix of its own (guard.WithKeyPrefix), so
// that runs on one Redis start alike. The overload comparison below
// drives one stage alone, which guard does not build, so it makes its
// stages from packages shedder and concurrency.
//
// # The report
//
// Every chart of the HTML report is a panel of one SVG drawn on one time
// axis: the run is cut into equal buckets (half a second, adjusted so that
// they divide the run exactly, at most 120) and every series has one value
// per bucket, counted by when the request started; nothing starts after
// the run's end, so no bucket is partial. Lanes above the panels mark the
// scenario's events (scraper, surge, brute force, Redis fault) and the
// Redis breaker's state; the panels show rate-limit decisions by where they
// were made (floodgate.Source, from the demo's own Observer), all requests
// by outcome, denials by policy, the latency of admitted requests (p50,
// p99), then each tier and priority. The captions (Report.Captions) are
// computed from the same counts, never written in advance.
//
// # The overload comparison
//
// After the main run, unless Config.SkipCompare, the demo drives one more
// service past its capacity three times: a gRPC handler that
// waits on a dependency serving 16 calls at once, offered three times what
// it serves with Poisson arrivals of 10% critical calls, behind the
// shedder with the fixed capacity of the main run (40), behind the shedder
// with an adaptive capacity (shedder.WithAdaptiveCapacity), and behind an
// adaptive concurrency limit alone (concurrency.NewAdaptive, Vegas). The
// report sets them side by side: goodput, critical calls served and their
// p99, and the capacity each held, over time.
//
// # Redis faults
//
// Config.Fault (`-redis-fault kill@8s`, `pause@8s:3s`) starts a
// redis-server of the demo's own on a free loopback port through
// testing/redistest, the helper the tests use, and kills it (SIGKILL;
// with a FOR, a new empty server on the same port FOR later) or pauses it
// (SIGSTOP; SIGCONT FOR later). It never touches a Redis it did not start,
// so it cannot be combined with REDIS_URL, and it fails at once, naming
// `make deps`, when redis-server is not installed.
package demo
