// quickstart-http:start

// Command shop-http is an HTTP service behind floodgate: shedding,
// in-flight caps and policy.yaml's rate limits, kept in Redis and shared
// by its replicas, with OpenTelemetry on the global providers.
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/floodgate-go/floodgate/guard"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cmp.Or(os.Getenv("ADDR"), "127.0.0.1:8080")); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, addr string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s\n", r.PathValue("id"))
	})

	g, err := guard.New(ctx,
		guard.WithPolicyFile("policy.yaml"),        // rules and identities, watched
		guard.WithRedisURL(os.Getenv("REDIS_URL")), // or guard.WithInProcess() for one instance
		guard.WithService("shop-http"),             // its replicas share the limits
		guard.WithServeMux(mux))                    // rules name its routes
	if err != nil {
		return err
	}
	defer g.Close(context.Background()) // hands local admits to Redis, leaves the fleet

	srv := &http.Server{Addr: addr, Handler: g.HTTP(mux)}
	go func() { <-ctx.Done(); srv.Shutdown(context.Background()) }()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// quickstart-http:end
