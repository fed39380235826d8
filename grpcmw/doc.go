// Package grpcmw decides how floodgate fits a gRPC server that already runs
// the interceptors of go-grpc-middleware v2
// (github.com/grpc-ecosystem/go-grpc-middleware/v2): which client address
// floodgate limits when realip resolved one, which decision fields the
// logging interceptor's lines carry, which methods a selector keeps out of
// floodgate, and how floodgate stages answer through the ratelimit
// interceptor for those who want it.
//
// It is a module of its own (github.com/floodgate-go/floodgate/grpcmw), so
// go-grpc-middleware reaches only the go.sum of services that import it,
// never that of the floodgate library.
//
// The usual order, outermost first: logging (so its "finished call" line
// sees what floodgate decided, including denials), realip (so floodgate
// limits the resolved client), floodgate's stages behind a selector, and
// recovery innermost:
//
//	fg, err := interceptor.New(grpcmw.WithRealIP(), grpcmw.WithLogFields())
//	exempt, err := grpcmw.Exempt("/admin.v1.Admin/*")
//	grpc.ChainUnaryInterceptor(
//		logging.UnaryServerInterceptor(logger),
//		realip.UnaryServerInterceptorOpts(realip.WithTrustedPeers(proxies), realip.WithHeaders([]string{realip.XForwardedFor})),
//		selector.UnaryServerInterceptor(fg.UnaryServer(shed), exempt),
//		selector.UnaryServerInterceptor(fg.UnaryServer(conc), exempt),
//		selector.UnaryServerInterceptor(fg.UnaryServer(limits), exempt),
//		recovery.UnaryServerInterceptor(),
//	)
//
// # Client address
//
// WithRealIP makes floodgate limit the address realip resolved
// (realip.FromContext), so the trusted peers and headers are configured
// once, in realip. When realip resolved nothing (it did not run for the
// call) floodgate falls back to its own resolution: the peer, and a
// forwarding header only through interceptor.WithTrustedProxies.
//
// # Log fields
//
// WithLogFields adds each decision to the logging fields of the call with
// logging.AddFields, under the names of the span attributes of package
// otel: floodgate.decision (floodgate.Decision.Label: allowed, limited,
// shed, concurrency_limited),
// .stage, .policy, .source, .priority, .limit, .remaining, .retry_after
// (seconds), .shadow and .degraded. Every decision writes the same keys, so
// the line shows the last decision of the call: the denying stage of a
// denied call, the last stage of an admitted one. No identity value (user,
// tenant, API key, IP) is added. The logging interceptor must run before
// floodgate's, and no interceptor in between may call logging.InjectFields
// (AddFields updates the fields nearest in the context). Decisions on the
// messages of a stream (interceptor.WithPerMessage) are not added:
// AddFields is not safe for concurrent use, and they are made while the
// handler may be sending.
//
// # Selector
//
// Exempt builds the selector.Matcher that keeps listed methods away from
// floodgate's interceptors; health checks are exempt without it. A selector
// around each stage's interceptor is equivalent to
// interceptor.WithSkip; use whichever the service already uses.
//
// # The ratelimit.Limiter adapter
//
// NewLimiter adapts rate-limit stages to ratelimit.Limiter, through the
// Interceptor that makes the chain's other floodgate interceptors, so
// every stage of a call sees one Request. It loses what
// floodgate's own interceptors send with a denial: the ratelimit
// interceptor turns every error into RESOURCE_EXHAUSTED with a string
// message, so a client gets neither the google.rpc ErrorInfo, RetryInfo and
// QuotaFailure details nor UNAVAILABLE for a shed call. The
// grpc-retry-pushback-ms trailer is still set. Prefer floodgate's own
// interceptors (interceptor.New) unless the ratelimit interceptor is
// required.
package grpcmw
