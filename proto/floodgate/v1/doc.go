// Package floodgatev1 holds the Go code generated from
// floodgate/v1/annotations.proto: the (floodgate.v1.method) method option
// (MethodLimits: cost and priority) that tells floodgate what a gRPC method
// costs and how important it is. Its rule field is informational: nothing
// reads it.
//
// Import the .proto in your service definition and annotate methods:
//
//	rpc Query(QueryRequest) returns (QueryResponse) {
//	  option (floodgate.v1.method) = {cost: 10, priority: PRIORITY_READ};
//	}
//
// Package interceptor reads the option from the registered descriptors;
// its package doc gives the order in which the annotation, the Go map and
// the policy decide.
//
// The (floodgate.v1.identity) field option marks a request field as an
// identity the rate limits key on (Identity: user, tenant or API key), so
// they key on the value the handler acts on; interceptor.FromProtoField
// reads it in unary calls:
//
//	message LoginRequest {
//	  string user = 1 [(floodgate.v1.identity) = IDENTITY_USER];
//	}
//
// Regenerate with `make proto`.
package floodgatev1
