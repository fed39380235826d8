// Package testpb is the generated code of the test service used by the
// interceptor tests (internal/testpb/test.proto): an Echo service whose
// Expensive method is annotated with cost 10 and priority critical.
// Regenerate with `make proto`.
package testpb
