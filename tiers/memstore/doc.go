// Package memstore is the in-process quota.Store: it decides takes on bucket
// state held in this process's memory, with exactly the arithmetic of
// quota.Algorithm, so that it gives the same decision as the Redis store
// (package tiers/redisstore) on the same trace; both pass the conformance
// suite in package testing/storetest. What it decides on its own is how a
// take stays atomic across its shards, and which state it forgets, and
// when, to keep memory bounded.
//
// # Decisions
//
//   - All or nothing. A Take charges every bucket its cost if and only if
//     every bucket allows; a deny anywhere charges nothing anywhere. All the
//     shards a Take touches are locked together (in ascending shard order,
//     each once, so concurrent Takes never deadlock) and the clock is read
//     under those locks, so each Take is atomic and time never runs backwards
//     within a bucket's history.
//   - Results. Allowed and RetryAfter are per bucket ("this bucket alone would
//     admit the cost"); Remaining and Reset describe the bucket as the Take
//     leaves it: after the charge when the Take allowed, untouched when it
//     denied.
//   - Bad input is an error, never a guess: Take refuses what
//     quota.ValidateTake refuses, with its error (the same text every store
//     gives). A policy that resolves two levels to one key has a bug worth
//     surfacing, and one state under two limits has no single right answer.
//     Cost 0 is allowed: it reads the bucket without charging it.
//   - A cost larger than the bucket's capacity (quota.Limit.Capacity) is
//     denied, charges nothing, and reports RetryAfter == quota.Never.
//   - Expiry. A bucket's state lives for the TTL the quota.Algorithm doc
//     gives (token bucket and GCRA: the reset time, at least 1 ms; sliding
//     window counter: to the end of the next window; sliding window log: the
//     newest timestamp plus the window; fixed window: to the end of the
//     window). At or after that instant the state is treated as absent (a new
//     bucket). Expired entries are removed lazily: each insertion of a new key
//     examines the next few entries of its shard (from a hand that rotates
//     through the shard, so every entry is reached in turn) and deletes
//     those expired for more than 10 seconds (so hot buckets whose state
//     lives milliseconds are reused, not reallocated), and a full shard
//     deletes every expired entry it examines before evicting (never an
//     entry the same Take uses). No goroutine runs.
//   - The key cap (WithMaxKeys, default 2^20 keys). The cap is split
//     evenly over the shards (shard i holds at most ceil or floor of
//     maxKeys/shards keys, summing to exactly maxKeys). Inserting a new key
//     into a full shard first examines the next 32 entries from the
//     shard's hand and deletes those that have expired; if none had, it
//     evicts the examined entry that would expire soonest (ties: the
//     smallest key), never one the same Take uses. When a shard holds at
//     most 32 keys every entry is examined, so the choice is exact: expired
//     entries first, else the live entry closest to expiry. An evicted
//     bucket starts again from a new, full bucket; that is the price of
//     bounded memory, paid by the bucket with the least state left to lose.
//   - Settle (quota.Settler) adjusts what takes charged, by a signed cost
//     per bucket, with the arithmetic of the quota.Algorithm doc
//     ("Settlement"): under the same shard locks as a take, at one reading
//     of the clock. Token bucket and GCRA carry debt (tokens below 0, a
//     TAT beyond the tolerance); the window algorithms settle in the
//     window current at settlement, never below 0 (the sliding log drops
//     its newest timestamps). An absent bucket is full: a refund leaves it
//     absent, a charge starts it from full. Settle with a negative cost is
//     how units taken ahead and not spent are given back (a cancelled
//     wait, an estimate above the actual cost): a token bucket is refilled
//     to now, then given the units, capped at its capacity; a TAT moves
//     back, never before now.
//   - Waiting (quota.Bucket.MaxWait, token bucket and GCRA): a bucket that
//     would deny but whose units arrive within MaxWait books them (tokens
//     below 0, the TAT beyond the tolerance) and reports the wait in
//     Result.Wait; later takes queue behind it.
//   - Bucket.OnStoreError and Bucket.CacheDenials are ignored: this store
//     never fails, and every answer is already local.
//   - Durations saturate: a Reset or RetryAfter beyond time.Duration's range
//     (about 292 years, reachable with a huge burst refilled slowly) is
//     reported as the largest Duration, never as a wrapped negative one.
//   - The sliding window log stores (timestamp, count) runs in a growable
//     ring per bucket, so a cost of c adds one run, not c timestamps; its
//     memory is bounded by the number of admitted requests in one window
//     (the buffer keeps the largest size it has needed while the bucket
//     lives).
package memstore
