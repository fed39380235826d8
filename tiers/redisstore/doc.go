// Package redisstore is a quota.Store kept in Redis (standalone, Sentinel
// through go-redis's FailoverClient, or Redis Cluster, all through
// redis.UniversalClient), so that every instance of a service decides from
// the same buckets. It decides how a take reaches Redis: in how many round
// trips and scripts, how it stays all or nothing when its keys span
// cluster slots, how long keys live, and when a denial may be answered
// without asking Redis at all.
//
// # Decisions
//
//   - Arithmetic. The five algorithms run inside Lua scripts (take.lua,
//     refund.lua, settle.lua, report.lua, embedded) with exactly the
//     arithmetic of the quota.Algorithm doc, on integer microseconds, so
//     decisions equal the in-process memstore's on the same trace. Every
//     script starts with a prelude generated from package quota at init:
//     the algorithm ids (TOKEN_BUCKET, GCRA, ...), GCRA's epoch and slack
//     as Lua locals, so the scripts hold no copy of a Go constant; the
//     assembled sources, and so their SHA1s, depend only on the code, and
//     New preloads them. Time is Redis TIME read inside the script, so pods
//     with skewed clocks agree; WithClock passes the time as an argument
//     instead (tests on fake time).
//
//   - Bad input. Take refuses what quota.ValidateTake refuses, with its
//     error (the same text every store gives), before any round trip.
//
//   - Atomicity and round trips. On a standalone or Sentinel-managed Redis a
//     Take is ONE EVALSHA whatever the number of buckets: the script checks
//     every bucket and then charges all of them or none. Scripts are loaded
//     at New; a NOSCRIPT reply (after SCRIPT FLUSH, a restart or a failover)
//     is answered by re-sending the script with EVAL, which also reloads
//     it, so the request does not fail.
//
//   - Failover. Through a FailoverClient, takes follow a Sentinel failover
//     to the promoted replica, batched ones included, and what was charged
//     and replicated before it stays charged. Redis replicates
//     asynchronously, and a Sentinel announces the new master only once
//     it has seen it promoted: what the old master charged in between is
//     lost with it, so for that moment the buckets under-count (never
//     over-count). TestSentinelFailover promotes a replica under three
//     concurrent callers: no take failed, and the old master had admitted
//     about a second of them (9 000–11 000 takes) that the new one never
//     saw.
//
//   - Redis Cluster. Keys are the prefix (default none: tiers.Limiter
//     already starts every bucket key with its own namespace, "fg:"; the
//     prefix must not contain '{' or '}') followed by the bucket key, so the
//     slot is chosen by the bucket key's own hash tag, never by the prefix.
//     Buckets are grouped by slot; a take whose buckets share a slot is one
//     script call, atomic as on a standalone Redis. A take spanning several
//     slots (tiers gives each identity its own tag, so a tenant + user + key
//     take spans up to one slot per identity) is NOT atomic in Redis: it
//     runs one take.lua part per slot, all sent at once, and if any slot
//     denies or fails, every slot that charged is refunded by refund.lua.
//     Round trips: one per master it touches, in parallel, when allowed
//     (the common case); one more, again in parallel, when denied. Batched
//     (the default), a flush carries every caller's parts in one pipeline,
//     which the cluster client splits by master (one round trip per master
//     per flush), and the parts of one master, whatever their slots, as one
//     script call (nodeScript; Redis 7's allow-cross-slot-keys, else one
//     call per slot); refunds go in the same pipelines. The net effect is
//     all or nothing, with this weaker consistency than the single-slot
//     case, the partial-charge window: from a slot's charge until its
//     refund lands (the slowest other part's reply plus one round trip), a
//     concurrent take can see the charged units and be denied by them; it
//     can never be admitted because of them, so limits are never exceeded,
//     only under-used, by at most the cost of each denied multi-slot take
//     in flight. A reserve-then-commit shape would hide the charge from
//     others only at the price of a second round trip on every ALLOWED
//     take, so it is not used. TestClusterPartialChargeSeen counts how
//     often a reader saw such a charge under a stream of denied 2-slot
//     takes (nearly always: every denier is inside its window most of its
//     life), and checks that none stays. A refund that fails (the node
//     went away, or refused writes) is the Take's error and is retried in
//     the background, in one pipeline per round, backing off from 20 ms to
//     2 s, until it applies or the units it gives back would have come
//     back by themselves (the latest reset of its buckets after the
//     charge, at most an hour), so a failed refund never leaves units
//     charged longer than the charge alone would, nor beyond an hour. Each
//     refund carries a marker key in its slot, set by refund.lua, so one
//     whose reply was lost and that ran anyway is not applied twice
//     (TestClusterRefundRetried, TestClusterRefundLostReply,
//     TestClusterRefundGivenUp). Close drops the refunds still waiting.
//     A batched take whose caller gives up (its context ends) after its
//     parts were queued is finished in the background as a whole: the
//     store waits for every part's answer, refunds the charging slots if
//     one denied, and hands the outcome to the receiver of late answers in
//     the take's context (package fallback's), if any, so a take abandoned
//     half-way never leaves one slot's charge standing after another
//     denied (TestClusterAbandonedTake). Unbatched, an abandoned part's answer is
//     lost with its caller.
//     No CROSSSLOT error can reach a caller. A slot moving to another
//     master (resharding) is followed through go-redis's redirects (ASK,
//     MOVED, TRYAGAIN, each answered before the script runs), batched takes
//     included; a merged call of several slots that meets a key its master
//     no longer serves fails before reading anything, and its takes go
//     again on their own: none fails and none is charged twice
//     (TestClusterSlotMigration moves a 4-level take's slot, key by key,
//     under concurrent takes). Failover: see below; a multi-slot take's
//     part on a dead master fails, and the parts that charged elsewhere
//     are refunded. A part replies integers only (its keys' states before
//     and after, which a refund needs, as 32-bit words), so the client
//     reads it without boxing a value per integer. To keep a take in one
//     slot, give its levels one hash tag: tiers tags a key with the rule's
//     first key scope, so rules keyed [tenant], [tenant, user] and
//     [tenant, api_key] put a call's levels in its tenant's slot (each
//     user's bucket is then per tenant, and a tenant's whole load is on
//     one master). Costs on a 3-master cluster against a standalone Redis,
//     both placements, and the hot-tenant trade-off are in bench/README.md
//     (make bench-cluster). A partial grant
//     (quota.Bucket.AtMost) is decided inside the script when its buckets
//     share a slot; across slots it takes two steps: a read of every
//     bucket (a take that denies, so it writes nothing), then the charge
//     of the grant as above. A take in between may spend what was read:
//     the charge then denies, it never grants more than a bucket holds.
//
//   - Cluster failover. When a master of a Redis Cluster dies, the
//     cluster promotes its replica by itself: the other masters mark it
//     failed once it has not answered for cluster-node-timeout, and its
//     replica wins an election half a second to a second later. Until
//     then a take in the dead master's slots fails: its connection is
//     refused (a take in flight at the death loses its reply), and from
//     the moment the master is marked failed until the promotion every
//     node answers CLUSTERDOWN for every slot (cluster-require-full-coverage,
//     on by default), so takes on the surviving masters fail too. None
//     of these is sent again, and none was admitted: a refused call and
//     a CLUSTERDOWN ran nowhere, and a take whose reply was lost may
//     have charged, which can only under-admit. The window lasts seconds,
//     far beyond the per-call budget of package fallback, which decides
//     every failed take by its rule's on_store_error (refused
//     connections open its breaker at once, so for the window, and until
//     a probe succeeds, all rules decide locally). A promoted replica
//     sends no MOVED for a dead master's slots, and go-redis otherwise
//     reloads its slot map only every ClusterStateReloadInterval (60 s by
//     default), so every cluster call that fails with a connection error,
//     a timeout or CLUSTERDOWN asks the client to reload it (go-redis
//     runs one reload at a time, at most one every 200 ms): takes reach
//     the new master within about 200 ms of the promotion. A caller
//     therefore sees errors for about cluster-node-timeout plus 1.5 s
//     after the death, and then takes that change state on the new
//     master. Redis replicates asynchronously: what the dead master
//     charged and had not yet sent to its replica is lost, the buckets
//     under-count by it, and that many units may be admitted again. It
//     is at most what the master admitted since the last write its
//     replica acknowledged, on a healthy link the last few milliseconds.
//     TestClusterFailover kills a master under four concurrent callers
//     (multi-level and multi-slot takes) with cluster-node-timeout 1 s:
//     the replica was promoted 2.1–2.5 s after the kill, the last take
//     failed within 200 ms of the promotion (2.2–2.6 s after the kill),
//     every failure was a refusal except the take each caller had in
//     flight at the kill, a surviving master's takes failed only with CLUSTERDOWN
//     (for about a second) and its buckets held exactly what was
//     admitted, and the promoted replica lacked no admitted unit (of at
//     most 4 admitted after a WAIT the dead master acknowledged just
//     before the kill).
//
//   - Expiry. Every key has a TTL at least as long as the Algorithm doc's,
//     and at least a second (WithMinTTL), so idle buckets vanish; with
//     Redis time the TTL is set only when the state needs a later deadline
//     than the key has (see WithMinTTL).
//
//   - Over-limit cache. A bucket with CacheDenials set that denied is
//     answered locally ("still denied", Source floodgate.SourceCache, the
//     other buckets of the take reported Allowed and unconsulted) until its
//     retry-after passes on the store's clock, for the same or a larger
//     cost. Entries are keyed by bucket key AND limit, so a changed limit
//     never inherits a stale denial. The cache is bounded
//     (10 000 denials unless WithDenialCache says otherwise; 0 turns
//     it off); a full cache makes room among a few of its denials, those
//     that ended or else the one ending first, so a flood of distinct
//     over-limit keys costs each a bounded look, not a scan. Each answer it gives is a Redis call saved; package otel
//     counts them by that Source.
//
//   - Client-side batching (on by default; WithBatching sets it, and
//     WithBatching(0, 0) turns it off): the takes of concurrent callers go
//     out in one pipeline, the takes of each cluster master (on a
//     standalone or Sentinel-managed Redis: all of them) as ONE take.lua
//     call that decides them in order, each all or nothing, exactly as if
//     each were its own call (a take with a sliding window log bucket, or
//     alone on its master, goes as its own call in the same pipeline; the
//     parts of takes spanning cluster slots are merged likewise, apart
//     from the takes, and refunds go as calls of their own). Each script call costs
//     Redis far more than a bucket does, so this cuts Redis and client CPU
//     per decision under concurrency (BenchmarkTake's parallel-default and
//     parallel-batched rows and bench/README.md show by how much); a lone
//     take goes out at once as its own call, so an idle store pays only a
//     hand-off to a flusher goroutine. The flushers run until Close.
//
//   - Settle (quota.Settler) runs settle.lua: one call per slot (all the
//     buckets on a standalone or Sentinel-managed Redis), each slot
//     atomically, sent through the batcher as takes are (unbatched, the
//     slots' calls in one pipeline, as a Report's are), with the
//     arithmetic memstore's Settle uses, debt included. A settlement is never retried: one that failed or timed
//     out may or may not have been applied in its slot, never twice. A
//     Settle of a negative cost is how units taken ahead and not spent go
//     back (token bucket refilled to now, then capped at the capacity; a
//     TAT moved back, never before now; an absent key stays absent), and
//     it lifts the bucket's cached denial. A Report of a negative cost
//     does the same for package tiers/localfirst's leases, recorded with
//     the rest of its ledger.
//
//   - No script call is sent twice, whatever the client's MaxRetries or
//     MaxRedirects: a call whose reply was lost (a read timeout, a
//     connection dropped after the write) may have run, so its take,
//     report or settlement fails and is never sent again (go-redis's own
//     retries re-sent it: one take was charged three times). A call a
//     Cluster refused with TRYAGAIN while its slot moves (it did not run)
//     is sent again up to 4 times, 8 ms apart and doubling; MOVED and ASK
//     are followed; any other refusal fails the call at once.
//
//   - Waiting (quota.Bucket.MaxWait): take.lua books the units of a token
//     bucket or GCRA bucket that arrive within the bucket's MaxWait (it is
//     passed with the bucket's limit only when set, so other takes' calls
//     are unchanged) and replies with their wait; the over-limit cache
//     answers for such a bucket only while its units are further away than
//     MaxWait.
//
//   - Redis version: 6.2 or later (take.lua sets TTLs with PXAT); on a
//     Cluster before 7.0 the batcher merges per slot, not per master.
package redisstore
