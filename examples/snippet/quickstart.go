package main

import (
	"context"
	"net"
	"net/http"
	"os"

	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate/guard"
	"github.com/floodgate-go/floodgate/interceptor"
)

// The README's first screen, compiled and tested (quickstart_test.go and
// readme_test.go): the README holds the text between the markers verbatim.

// snippet-quickstart:start
// serve puts the whole chain in front of an HTTP mux and a gRPC server:
// shedding, in-flight caps, the policy's rate limits kept in Redis, the
// fallback sharing them among the live instances of "shop" when Redis is
// away, OpenTelemetry on the global providers.
func serve(ctx context.Context, httpLn, grpcLn net.Listener, mux *http.ServeMux, register func(*grpc.Server)) error {
	g, err := guard.New(ctx,
		guard.WithPolicyFile("policy.yaml"),        // watched: a bad edit leaves the old policy in force
		guard.WithRedisURL(os.Getenv("REDIS_URL")), // or guard.WithInProcess() for one instance
		guard.WithService("shop"),                  // its replicas share the limits
		guard.WithServeMux(mux),                    // rules name routes: "GET /v1/items/{id}"
		guard.WithInterceptor( // identities, as your gateway sets them after authentication
			interceptor.WithUser(interceptor.FromHeader("x-user-id")),
			interceptor.WithTenant(interceptor.FromHeader("x-tenant-id")),
			interceptor.WithTier(interceptor.FromHeader("x-plan"))))
	if err != nil {
		return err
	}
	defer g.Close(context.Background()) // reports local admits to Redis, leaves the fleet

	srv := grpc.NewServer(g.ServerOptions()...)
	register(srv)
	if err := g.CheckServer(srv); err != nil { // a rule naming a method srv lacks
		return err
	}
	go srv.Serve(grpcLn) //nolint:errcheck // ends with the listener
	defer srv.GracefulStop()
	return (&http.Server{Handler: g.HTTP(mux)}).Serve(httpLn)
}

// snippet-quickstart:end
