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
package floodgate
