// Command rls-floor serves envoy.service.ratelimit.v3.RateLimitService
// without deciding anything: every call is answered OK, each descriptor
// with a fixed limit, remaining count and reset, the shape
// envoyproxy/ratelimit answers with. It is the benchmark's floor: what
// grpc-go, HTTP/2 and the Envoy protos cost a rate limit service before it
// does any work, with floodgate-rls's server options (reused stream
// workers). It uses no Redis.
//
//	rls-floor -listen 127.0.0.1:PORT
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// streamWorkers is floodgate-rls's setting (rls/cmd/floodgate-rls).
const streamWorkers = 256

// maxDescriptors is the most descriptors a call may carry here.
const maxDescriptors = 64

// floor answers every call with a response built once per descriptor
// count; grpc-go marshals it afresh for every call, as it does any answer.
type floor struct {
	rlsv3.UnimplementedRateLimitServiceServer
	answers [maxDescriptors + 1]*rlsv3.RateLimitResponse
}

func newFloor() *floor {
	f := &floor{}
	limit := &rlsv3.RateLimitResponse_RateLimit{Name: "floor", RequestsPerUnit: 10_000_000, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}
	for n := range f.answers {
		resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
		for range n {
			resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{
				Code: rlsv3.RateLimitResponse_OK, CurrentLimit: limit,
				LimitRemaining: 9_999_999, DurationUntilReset: durationpb.New(30e9),
			})
		}
		f.answers[n] = resp
	}
	return f
}

// ShouldRateLimit answers OK for every descriptor.
func (f *floor) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	n := len(req.GetDescriptors())
	if n > maxDescriptors {
		return nil, fmt.Errorf("rls-floor: %d descriptors, at most %d", n, maxDescriptors)
	}
	return f.answers[n], nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "loopback address to serve on")
	flag.Parse()
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rls-floor: %v\n", err)
		os.Exit(1)
	}
	g := grpc.NewServer(grpc.NumStreamWorkers(streamWorkers))
	rlsv3.RegisterRateLimitServiceServer(g, newFloor())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() { <-sig; g.GracefulStop() }()
	if err := g.Serve(lis); err != nil {
		fmt.Fprintf(os.Stderr, "rls-floor: %v\n", err)
		os.Exit(1)
	}
}
