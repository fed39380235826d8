// Package shoppb holds the Go code generated from shop.proto: the demo's gRPC
// shop service (Login, Search, Pay), each method annotated with its floodgate
// priority and cost. Regenerate with `make proto`.
package shoppb
