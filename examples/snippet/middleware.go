package main

import (
	"errors"
	"net/netip"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/realip"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate/grpcmw"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/tiers"
)

// docs/integrations.md's "With go-grpc-middleware" section, compiled and
// tested (readme_test.go): the page holds the text between the markers verbatim.

// snippet-grpcmw:start
func newMiddlewareServer(limits *tiers.Limiter, proxies []netip.Prefix, logger logging.Logger) (*grpc.Server, error) {
	fg, err := interceptor.New(
		grpcmw.WithRealIP(),    // limit the client realip resolved
		grpcmw.WithLogFields(), // floodgate.* fields on each call's log line
	)
	exempt, err2 := grpcmw.Exempt("/admin.v1.Admin/*") // never limited
	if err := errors.Join(err, err2); err != nil {
		return nil, err
	}
	return grpc.NewServer(grpc.ChainUnaryInterceptor(
		logging.UnaryServerInterceptor(logger),
		realip.UnaryServerInterceptorOpts(realip.WithTrustedPeers(proxies), realip.WithHeaders([]string{realip.XForwardedFor})),
		selector.UnaryServerInterceptor(fg.UnaryServer(limits), exempt),
		recovery.UnaryServerInterceptor(),
	)), nil
}

// Through go-grpc-middleware's ratelimit interceptor instead: clients lose
// the status details (RetryInfo, QuotaFailure); the pushback trailer stays.
func newRatelimitServer(limits *tiers.Limiter) (*grpc.Server, error) {
	fg, err := interceptor.New(grpcmw.WithRealIP()) // the chain's other floodgate interceptors come from fg too
	if err != nil {
		return nil, err
	}
	lim, err := grpcmw.NewLimiter(fg, limits)
	if err != nil {
		return nil, err
	}
	return grpc.NewServer(grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(lim))), nil
}

// snippet-grpcmw:end
