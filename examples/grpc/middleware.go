package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/realip"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/grpcmw"
)

// The go-grpc-middleware v2 interceptors the service runs around floodgate's
// stages (see run): logging, realip, selector and recovery.

// reflectionServices are never limited by default: grpcurl and other tools
// list the service through them.
const reflectionServices = "/grpc.reflection.v1.ServerReflection/*,/grpc.reflection.v1alpha.ServerReflection/*"

// middleware holds the configured go-grpc-middleware pieces.
type middleware struct {
	logger    logging.Logger
	logOpts   []logging.Option
	realIP    []realip.Option
	limited   selector.Matcher // every method but the -unlimited ones
	recovered recovery.Option
}

// newMiddleware configures the pieces from the -trusted-proxies and
// -unlimited flags.
func newMiddleware(logger *slog.Logger, trustedProxies, unlimited string) (*middleware, error) {
	var proxies []netip.Prefix
	for _, s := range splitList(trustedProxies) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("-trusted-proxies: %q is not a CIDR or address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		proxies = append(proxies, p.Masked())
	}
	limited, err := grpcmw.Exempt(splitList(unlimited)...)
	if err != nil {
		return nil, fmt.Errorf("-unlimited: %w", err)
	}
	return &middleware{
		// One line per finished call; grpcmw.WithLogFields adds floodgate's
		// decision to it.
		logger: logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
			logger.Log(ctx, slog.Level(lvl), msg, fields...)
		}),
		logOpts: []logging.Option{logging.WithLogOnEvents(logging.FinishCall)},
		// Only a peer in -trusted-proxies may name the client in
		// X-Forwarded-For; grpcmw.WithRealIP makes floodgate limit it.
		realIP:  []realip.Option{realip.WithTrustedPeers(proxies), realip.WithHeaders([]string{realip.XForwardedFor})},
		limited: limited,
		// A panicking handler answers INTERNAL, without the panic's text.
		recovered: recovery.WithRecoveryHandler(func(p any) error {
			logger.Error("handler panic", "panic", p)
			return status.Error(codes.Internal, "internal error")
		}),
	}, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
