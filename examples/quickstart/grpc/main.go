// quickstart-grpc:start

// Command shop-grpc is a gRPC service behind floodgate, on the same
// policy.yaml: the same chain, its limits shared by its replicas.
package main

import (
	"cmp"
	"context"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate/guard"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	register := func(s *grpc.Server) { // your services here
		healthpb.RegisterHealthServer(s, health.NewServer())
	}
	if err := run(ctx, cmp.Or(os.Getenv("ADDR"), "127.0.0.1:9090"), register); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, addr string, register func(*grpc.Server)) error {
	g, err := guard.New(ctx,
		guard.WithPolicyFile("policy.yaml"),
		guard.WithRedisURL(os.Getenv("REDIS_URL")),
		guard.WithService("shop-grpc"))
	if err != nil {
		return err
	}
	defer g.Close(context.Background())

	srv := grpc.NewServer(g.ServerOptions()...)
	register(srv)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); srv.GracefulStop() }()
	return srv.Serve(lis)
}

// quickstart-grpc:end
