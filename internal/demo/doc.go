// Package demo is the engine behind `floodgate demo`: it starts an HTTP and a
// gRPC service in-process, protected by the whole floodgate chain, drives
// mixed traffic at them from bounded loops, and reports what each tenant
// tier and priority met (a text table and a self-contained HTML page).
//
// What it decides: the demo's traffic mix and its policy are fixed (see
// policy.yaml and Scenario) so runs are comparable; only the duration and
// the store (in-process, or Redis when a URL is given) change.
package demo
