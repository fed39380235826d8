package main

import (
	"context"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// setupRedisRate1 is the yardstick the issue names: what a user of
// github.com/go-redis/redis_rate/v10 writes as a gRPC interceptor, one
// level (the user from x-user metadata, 1 000/s like the chain's user
// rule), RESOURCE_EXHAUSTED on a deny. No shedder or concurrency stage.
func setupRedisRate1(_ context.Context, e *env) ([]grpc.ServerOption, error) {
	c, err := e.newRedisClient()
	if err != nil {
		return nil, err
	}
	lim := redis_rate.NewLimiter(c)
	limit := redis_rate.Limit{Rate: 1_000, Burst: 1_000, Period: time.Second}
	prefix := e.Prefix + "rr:"
	ic := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		user := ""
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get("x-user"); len(v) > 0 {
				user = v[0]
			}
		}
		res, err := lim.Allow(ctx, prefix+user, limit)
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		if res.Allowed == 0 {
			return nil, status.Error(codes.ResourceExhausted, "rate limited")
		}
		return h(ctx, req)
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(ic)}, nil
}
