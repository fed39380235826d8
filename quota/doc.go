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
// Unwrap() Store, returning what it wraps. Capability checks (Settles,
// and the checks of package tiers) follow the Unwrap chain, so a wrapper
// never hides what the store beneath can do; a wrapper that adds a
// capability of its own (a local fallback deciding on_store_error, a
// local-first layer deciding leased and async buckets) says so itself.
package quota
