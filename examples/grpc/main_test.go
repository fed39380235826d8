package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/examples/internal/exampletest"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/shoppb"
)

var (
	listening = regexp.MustCompile(`grpc example listening on (\S+)`)
	metricsAt = regexp.MustCompile(`metrics: (http://\S+/metrics)`)
)

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func as(ctx context.Context, user string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-user", user)
}

func TestGRPCExample(t *testing.T) {
	out := exampletest.Start(t, run, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0",
		"-policy", "../policy.yaml", "-work", "1ms", "-redis", "")
	addr := out.WaitFor(t, listening, 1, 10*time.Second)[1]
	metrics := out.WaitFor(t, metricsAt, 1, time.Second)[1]
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()

	// Without retries: grpc-search-user allows 5 in a burst, then the server
	// pushes back with RESOURCE_EXHAUSTED, the pushback trailer and details.
	shop := shoppb.NewShopClient(dial(t, addr))
	var denied error
	var trailer metadata.MD
	for i := 1; i <= 10 && denied == nil; i++ {
		var tr metadata.MD
		_, err := shop.Search(as(ctx, "alice"), &shoppb.SearchRequest{Query: "lamp"}, grpc.Trailer(&tr))
		if err != nil && i <= 5 {
			t.Fatalf("search %d: %v, want ok", i, err)
		}
		denied, trailer = err, tr
	}
	if status.Code(denied) != codes.ResourceExhausted {
		t.Fatalf("10 searches in a row: last error %v, want RESOURCE_EXHAUSTED", denied)
	}
	ms, err := strconv.Atoi(strings.Join(trailer.Get(interceptor.PushbackTrailer), ""))
	if err != nil || ms <= 0 || ms > 200 {
		t.Errorf("pushback trailer %q, want 1..200 ms", trailer.Get(interceptor.PushbackTrailer))
	}
	var info *errdetails.ErrorInfo
	var quota *errdetails.QuotaFailure
	for _, d := range status.Convert(denied).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.QuotaFailure:
			quota = d
		}
	}
	if info == nil || info.Reason != "RATE_LIMIT_EXCEEDED" || info.Domain != "shop.example.com" {
		t.Errorf("ErrorInfo = %v", info)
	}
	if quota == nil || len(quota.Violations) != 1 || quota.Violations[0].Subject != "grpc-search-user" {
		t.Errorf("QuotaFailure = %v", quota)
	}

	// With the retrying client interceptor, every call succeeds: it waits as
	// the server asks.
	retrying := shoppb.NewShopClient(dial(t, addr,
		grpc.WithUnaryInterceptor(interceptor.UnaryClient(interceptor.WithMaxAttempts(4)))))
	for i := 1; i <= 8; i++ {
		if _, err := retrying.Search(as(ctx, "bob"), &shoppb.SearchRequest{Query: "desk"}); err != nil {
			t.Fatalf("retrying search %d: %v", i, err)
		}
	}

	// Streams are charged once when they open: grpc-list-user allows 2 in a
	// burst, the third is denied on its first receive, and the retrying
	// stream client reopens it after the server's delay.
	for i := 1; i <= 3; i++ {
		stream, err := shop.ListItems(as(ctx, "carol"), &shoppb.ListItemsRequest{Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		var items int
		for {
			_, err = stream.Recv()
			if err != nil {
				break
			}
			items++
		}
		switch {
		case i <= 2 && (err != io.EOF || items != 3):
			t.Fatalf("stream %d: %d items, then %v", i, items, err)
		case i == 3 && status.Code(err) != codes.ResourceExhausted:
			t.Fatalf("stream 3: %d items, then %v; want RESOURCE_EXHAUSTED", items, err)
		}
	}
	streaming := shoppb.NewShopClient(dial(t, addr,
		grpc.WithStreamInterceptor(interceptor.StreamClient(interceptor.WithMaxAttempts(4)))))
	stream, err := streaming.ListItems(as(ctx, "carol"), &shoppb.ListItemsRequest{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("retrying stream, item %d: %v", i, err)
		}
	}

	// The health service is never limited: 300 checks pass from the address
	// that ip-safety-net (burst 100) limits on Pay.
	health := healthpb.NewHealthClient(dial(t, addr))
	for i := range 300 {
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health check %d: %v %v", i+1, resp, err)
		}
	}
	var ipLimited bool
	for range 1000 {
		_, err := shop.Pay(ctx, &shoppb.PayRequest{AmountCents: 100})
		if status.Code(err) == codes.ResourceExhausted {
			ipLimited = strings.Contains(err.Error(), "ip-safety-net")
			break
		} else if err != nil {
			t.Fatalf("pay: %v", err)
		}
	}
	if !ipLimited {
		t.Error("1000 payments from one address were not limited by ip-safety-net")
	}

	resp, err := http.Get(metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`floodgate_decisions_total{floodgate_decision="limited",floodgate_policy="grpc-search-user"`,
		`floodgate_decisions_total{floodgate_decision="limited",floodgate_policy="ip-safety-net",floodgate_priority="critical"`,
		`floodgate_in_flight{floodgate_stage="tiers"`,
		`rpc_server_call_duration_seconds_count`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestGRPCExampleBadInput(t *testing.T) {
	out := exampletest.NewOutput()
	if err := run(t.Context(), []string{"-policy", "no-such-policy.yaml", "-redis", ""}, out); err == nil || !strings.Contains(err.Error(), "no-such-policy.yaml") {
		t.Errorf("missing policy: err = %v", err)
	}
	if err := run(t.Context(), []string{"-policy", "../policy.yaml", "-redis", "", "extra"}, out); err == nil || !strings.Contains(err.Error(), "extra") {
		t.Errorf("stray argument: err = %v", err)
	}
}
