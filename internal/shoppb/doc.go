// Package shoppb holds the Go code generated from shop.proto: the shop gRPC
// service (Login, Search, the server stream ListItems, Pay) that both the
// demo (internal/demo) and the examples module serve, each method annotated
// with its floodgate priority. Regenerate with `make proto`.
package shoppb
