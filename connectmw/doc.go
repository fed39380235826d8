// Package connectmw decides how floodgate guards a Connect service
// (connectrpc.com/connect): which calls of a handler its stages admit, what
// a denied call is answered in each of Connect's protocols (Connect, gRPC
// and gRPC-Web), and when a Connect client retries a denied call.
//
// It is a module of its own (github.com/floodgate-go/floodgate/connectmw),
// so connect-go reaches only the go.sum of services that import it, never
// that of the floodgate library.
//
// # Handlers
//
// NewHandler adapts floodgate stages to connect.Interceptor with one
// interceptor.Interceptor's options, as its UnaryServer adapts them to
// grpc-go:
//
//	fg, err := interceptor.New(interceptor.WithUser(interceptor.FromHeader("x-user")))
//	guard, err := connectmw.NewHandler(fg, floodgate.Chain{shed, limits})
//	path, h := pingv1connect.NewPingServiceHandler(svc, connect.WithInterceptors(guard))
//
// A call is one floodgate.Request: its Method is the procedure
// ("/pkg.Service/Method"), so a policy's rules, its methods: section and
// the proto annotations key on it as on the same gRPC method; its
// identity comes from the request headers, the peer address (through
// trusted proxies as configured) and, for unary calls, the request
// message. A stream is admitted once when it opens (and each received
// message with interceptor.WithPerMessage); its stages' Done run when the
// handler returns. A call a rate-limit rule held before letting it
// proceed (max_wait) says how long in its Server-Timing response header,
// and one admitted over soft limits names them in its
// X-RateLimit-Soft-Exceeded response header and in its Request's
// SoftExceeded, as a gRPC call does. Health checks and WithSkip's methods are not limited.
//
// A denial is the *connect.Error of the deciding stage's semantics:
// RESOURCE_EXHAUSTED for a rate or concurrency limit, UNAVAILABLE for the
// shedder (HTTP 429 and 503 in the Connect protocol), with the message
// and the details of interceptor.DenyStatus (google.rpc.ErrorInfo,
// RetryInfo and QuotaFailure, read back with connect.ErrorDetail.Value)
// and, as error metadata, the grpc-retry-pushback-ms field grpc-go's retry
// policy honours (in the gRPC protocol's trailers) and the denial's HTTP
// fields (Retry-After, RateLimit-Policy, RateLimit).
// interceptor.WithDenyResponse's Message replaces the message; code,
// details and metadata stay (its Status and Body are the net/http
// middleware's: every Connect protocol writes errors in its own format).
//
// # Clients
//
// NewClient retries a Connect client's calls as interceptor.UnaryClient
// and StreamClient retry gRPC calls: only RESOURCE_EXHAUSTED and
// UNAVAILABLE, only when the server said when (pushback first, then
// RetryInfo), bounded, with jitter and within the deadline; unary calls
// and server streams (whose first answer is the denial) are retried,
// client and bidi streams are not. With interceptor.WithThrottle it also
// throttles itself, calls and streams, while the server rejects most of
// them. RetryDelay reads the server's delay from any Connect error.
package connectmw
