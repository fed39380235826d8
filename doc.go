// Package floodgate holds the core types shared by every floodgate stage and
// transport: the transport-neutral Request, the Decision a stage makes about
// it, the Admitter interface each stage implements, the Chain that runs stages
// in order, the Observer told of every decision, and the Clock through which
// every stage reads time.
//
// A request passes the stages in a fixed order: the priority load shedder
// (package shedder), the in-flight limiter (package concurrency), and the
// hierarchical rate limits (package tiers, optionally over a store guarded by
// package fallback). Package interceptor adapts any Admitter to gRPC and
// net/http; no stage knows about either transport.
//
// What this package decides: how stages compose. A Chain admits a request only
// if every stage admits it, stops at the first deny, and releases the stages
// already passed when a later one denies. The Decision a stage returns is
// always what to do; a non-nil error alongside it only says why the stage
// could not decide in its normal way (for example the store was down and the
// rule's fail mode decided instead), and is for logs and telemetry.
//
// # What a deny means
//
// Every kind of stage (Stage) has one Semantics: the gRPC code, HTTP
// status, RFC 9457 problem type, google.rpc.ErrorInfo reason and telemetry
// label of its deny. The transports and package otel read it from
// Stage.Semantics and never decide it themselves, so a new kind of stage
// is one constant and one entry of this package's table. A Stage this
// package does not define denies as a rate limit (StageTiers).
//
// # Wrapping a stage
//
// A stage may offer more than Admit: a *tiers.Limiter offers its policy's
// per-method options (MethodOptions), the request headers its rules read
// (RequestHeaders) and a check of the identity its keys need
// (RequireScopes), and package interceptor uses each. An Admitter that
// wraps another (to time it, count it, log it) keeps those working by
// following one convention: it has a method
//
//	Unwrap() floodgate.Admitter
//
// returning the Admitter it wraps. As and All find what a stage offers
// through any number of such wrappers and through the stages of a Chain,
// as errors.AsType does through wrapped errors; the interceptor finds
// every capability it uses that way and no other. A wrapper that has a
// capability method itself stands for the stage it wraps: its method is
// used, and the wrapped stage's is not looked for. Every wrapper in this
// module (the interceptor's observer, package otel's TrackInFlight)
// follows the convention.
package floodgate
