// Package quota is the contract between floodgate's rate-limit decisions
// and the stores that keep bucket state: what a bucket is (Bucket, Limit,
// Algorithm), what a store answers for it (Result), and what a store can
// do (Store takes; Settler adjusts a charge after the fact; Reporter
// charges units admitted elsewhere). It also holds the validation every
// store runs on its arguments (ValidateTake, ValidateSettle,
// ValidateReport), so bad input reads the same whichever store refuses it,
// and the one place where a rule's on_store_error is applied to a take the
// store could not decide (DecideUnavailable).
//
// What it decides: the arithmetic of every algorithm, written once in the
// Algorithm doc, which every store implements exactly (package
// testing/storetest holds the shared vectors and the conformance suite);
// what a take, a settlement and a report may be given; and how a fail mode
// answers without the store.
//
// It imports only the core package floodgate. Backends (tiers/memstore,
// tiers/redisstore), wrappers (fallback, tiers/localfirst, otel) and the
// policy language (tiers) import it; it imports none of them, so a backend
// never links the policy language, YAML or the stages.
//
// # Wrapping a store
//
// A store that wraps another and forwards calls to it implements
// Unwrap() Store, returning what it wraps: package fallback's Store (its
// primary), package tiers/localfirst's Store (its exact store) and the
// store package otel's Observer.Store returns. Layers yields a store and
// every store beneath it along that chain, and every capability check
// walks it, so a wrapper never hides what the store beneath can do:
//
//   - settling (Settler, for rules with settle or max_wait): Settles
//     wants every layer to be a Settler, forwarding to the next, and no
//     layer's CanSettle() bool to say false;
//   - report calls (Reporter, what package tiers/localfirst needs of its
//     ledger): every layer a Reporter;
//   - answering for a failed backend (a DecidesOnStoreError() bool
//     method reporting true: package fallback, and memstore, which has no
//     backend to lose): any layer, since the layers above it then never
//     see a store error (package tiers warns about on_store_error local
//     rules otherwise);
//   - answering abandoned takes late (an AnswersLate() bool method
//     reporting true: tiers/redisstore with batching, which hands package
//     fallback the answer to a take its caller stopped waiting on): any
//     layer, since fallback's receiver of late answers travels in the
//     take's context, which every wrapper passes on;
//   - deciding leased and async buckets locally (a
//     DecidesConsistency(Consistency) bool method: package
//     tiers/localfirst): any layer (package tiers refuses leased and
//     async rules otherwise).
//
// A wrapper that cannot know statically whether what it wraps has a
// capability (package otel's, which wraps any store) implements the
// methods anyway, returns an error naming the wrapped store when one is
// called without it, and leaves the checks above to report the
// capability missing through Unwrap, so a Limiter refuses at
// construction what would otherwise fail per request.
//
// Closing is not walked. A layer with something of its own to hand over
// at shutdown has a Close(ctx context.Context) error that hands it over
// and closes nothing beneath it, which the caller owns (package
// tiers/localfirst's Store: its hits and leases; package fallback's: the
// units it admitted locally); close the layers top down, then the Redis
// store and its client. package otel's wrapper, which holds nothing of
// its own, closes what it wraps from its Close() error.
package quota
