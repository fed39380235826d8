// Package floodgatev1 holds the Go code generated from
// floodgate/v1/annotations.proto: the (floodgate.v1.method) method option
// (MethodLimits: cost, priority, rule) that tells floodgate what a gRPC
// method costs and how important it is.
//
// Import the .proto in your service definition and annotate methods:
//
//	rpc Query(QueryRequest) returns (QueryResponse) {
//	  option (floodgate.v1.method) = {cost: 10, priority: PRIORITY_READ};
//	}
//
// The interceptor package reads the option from the registered descriptors
// (interceptor.LookupAnnotation). Regenerate with `make proto`.
package floodgatev1
