// Package policyfile owns floodgate's policy file as a whole: it loads
// the YAML file, the rate limits (package tiers' sections), the settings
// of the load shedder and the concurrency limiters (the shedder: and
// concurrency: sections) and where the transport finds identities (the
// identity: section), and watches it, applying every change to the rate
// limiter and to those stages together.
//
// What it decides: which section goes to which stage, that a reload is
// checked against every stage before anything changes (so a reload that
// fails leaves the rate limits and every stage as they were), that a
// section nothing applies is refused, and where each mistake is in the
// file. It imports the stages it configures (tiers, shedder, concurrency)
// and the core; no stage imports it. Package tiers decodes its own
// sections and refuses these two, so a file loaded through tiers alone
// never drops them unseen.
//
// # Errors
//
// Load reports every mistake with its field path and line, the stages' own
// validation included: the stages report a bad setting by its key path,
// which is the path under the section, so the line of
//
//	shedder.adaptive.max: 5 must be >= min 10, at line 7
//
// is found without reading the message.
//
// # The shedder:, concurrency: and identity: sections
//
// Every key, with an example value; each is optional unless said
// otherwise, and leaving one out means the stage's default. The keys are
// the snake_case names of the Go fields (shedder.Config,
// shedder.Thresholds, shedder.AdaptiveCapacity, shedder.Retries, fleetshed.Config,
// concurrency.PerKey, concurrency.AdaptiveConfig, concurrency.Wait), with
// the same defaults and the same validation. Numbers must be greater than
// 0 and durations are strings ("100ms").
//
//	shedder:                   # a *shedder.Shedder (Targets.Shedder)
//	  capacity: 200            # fixed; with adaptive, where it starts (default min)
//	  thresholds: {test: 0.7, read: 0.8, write: 0.9}
//	  adaptive:                # the capacity follows the service
//	    min: 16
//	    max: 2000
//	    window: 100ms
//	    min_samples: 10
//	    history: 50
//	    probe: 10s
//	    tolerance: 1.5
//	    headroom: 1.25
//	    growth: 0.1
//	    backoff: 0.9
//	    cpu_target: 0.9        # needs the Shedder built WithCPU
//	    memory_target: 0.8     # needs a memory meter (AdaptiveCapacity.Memory, package shedder/mem)
//	  retries:                 # retries shed before first attempts (shedder.Retries)
//	    margin: 0.05           # below each priority's threshold, a share of capacity
//	    attempt_header: x-envoy-attempt-count   # besides grpc-previous-rpc-attempts
//	  fairness:                # each priority's room shared among callers (floodgate.Fairness)
//	    by: tenant             # or user, api_key, ip
//	    weights: {free: 1, pro: 4}   # by plan tier; a tier not listed weighs 1
//	  fleet:                   # a *fleetshed.Shedder (Targets.Fleet)
//	    capacity: 4000         # required unless adaptive is set
//	    reserve: 0.2
//	    adaptive: {min: 16, max: 2000, window: 100ms, min_samples: 10, history: 50, probe: 10s,
//	      tolerance: 1.5, headroom: 1.25, growth: 0.1, backoff: 0.9, cpu_target: 0.9,
//	      memory_target: 0.8}
//	    fairness: {by: tenant, weights: {pro: 4}}   # each instance shares its part of the room
//	concurrency:
//	  global: 500              # a *concurrency.Limiter built WithGlobal (Targets.Concurrency)
//	  per_key:                 # that Limiter's caps per key (WithPerKey; Limiter.SetPerKey)
//	    - name: per-user-in-flight   # required: the cap's policy name in decisions
//	      key: user            # required: user, tenant or api_key, the identity counted
//	      cap: 8               # required: the most requests in flight per key
//	      max_keys: 10000      # the most keys in flight at once (concurrency.DefaultMaxKeys)
//	  wait:                    # that Limiter's requests wait for a slot (Limiter.SetWait)
//	    max: 50ms              # the longest wait; leave wait out to deny at once
//	    queue: 200             # the most requests waiting
//	    order: lifo            # or fifo (default), or codel; priority first either way
//	    target: 5ms            # codel: the wait a standing queue is cut to
//	    interval: 100ms        # codel: how long the queue stays non-empty for that
//	    fairness: {by: tenant, weights: {pro: 4}}   # a freed slot to the caller holding fewest
//	  adaptive:                # a *concurrency.Adaptive (Targets.Adaptive)
//	    name: adaptive-concurrency
//	    algorithm: gradient2   # or vegas, aimd
//	    initial: 20
//	    min: 8
//	    max: 400
//	    window: 1s
//	    min_samples: 10
//	    max_samples: 1000
//	    percentile: 0.5
//	    backoff: 0.9
//	    retry_after: 1s
//	    bypass: critical       # never refuse critical calls
//	    smoothing: 0.2         # gradient2
//	    tolerance: 1.5
//	    long_window: 600
//	    alpha: 3               # vegas
//	    beta: 6
//	    probe_every: 60
//	    timeout: 2s            # aimd
//	    wait: {max: 50ms, queue: 200, order: lifo, target: 5ms, interval: 100ms,
//	      fairness: {by: user, weights: {pro: 2}}}
//	identity:                  # where the transport finds identities (Targets.Identity)
//	  user: header:x-user-id   # header:NAME (HTTP header or gRPC metadata) or claim:NAME
//	  tenant: [claim:tenant, header:x-tenant-id]   # a list: the first that gives a value
//	  api_key: header:x-api-key
//	  tier: header:x-plan      # the caller's plan, for rate "tier"
//	  client_ip:
//	    header: x-forwarded-for            # or forwarded, x-real-ip; believed from these only:
//	    trusted_proxies: [10.0.0.0/8, 192.168.1.10]
//	    ipv4_prefix: 32        # the default of rules keyed on ip that do not say
//	    ipv6_prefix: 64
//	outbound:                  # the service's own outgoing calls (Targets.Outbound, File.Outbound)
//	  cooldown:                # applied by package guard (see guard.Guard.RoundTripper)
//	    default: 1s            # a 429 without Retry-After stops calls to its host this long
//	    max: 1m                # the longest any refusal stops them, whatever it asks
//	    sync: 100ms            # how stale a replica's view of the fleet's cooldowns may be
//
// outbound: also holds rate-limit rules (tiers, default_tier, rules,
// overrides, shadow, as at the top of the file; see docs/policy.md) that
// match outgoing calls by "/HOST/PATH" or gRPC full method; package tiers
// decodes them, and their errors carry the outbound. path and line.
// A file with an outbound: section needs Targets.Outbound.
//
// shedder: sets a Shedder when it has capacity, thresholds, adaptive,
// retries or fairness (the last two alone need capacity or adaptive
// beside them);
// a section with only fleet: leaves the Shedder alone. Watch refuses a
// file that sets a stage Targets leaves nil, and a setting the stage
// would refuse (a cpu_target or memory_target for a Shedder without a
// CPU or memory meter, global for a Limiter built without WithGlobal).
// wait: applies to the Limiter
// of Targets.Concurrency whatever its caps (global or per key); a reload
// without it sets the Limiter's wait back to what it had when Watch
// started. per_key: sets the per-key caps of that Limiter by name: a
// reload changes a cap's key, cap and max_keys, and a cap the file leaves
// out returns to what it was when Watch started; a cap the Limiter was
// built without is refused (a cap is made with the Limiter, so adding one
// takes a restart). A request without the identity a cap's key names is
// not counted by it.
//
// identity: is read when the transport is built (package guard
// builds package interceptor's extractors from it); a header source names
// a header your gateway or auth layer sets and strips from client
// requests, since a client can send any header, and a claim source a
// claim of the token your auth middleware verified. Watch refuses a
// reload that changes identity: (restart to apply it).
package policyfile
