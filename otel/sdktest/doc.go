// Package sdktest tests package github.com/floodgate-go/floodgate/otel
// against the real OpenTelemetry SDK (span recorder, manual metric reader)
// and, end to end, through a real gRPC call instrumented by otelgrpc and a
// real HTTP request instrumented by otelhttp. It is its own module so that
// the SDK never reaches the library's go.sum.
package sdktest
