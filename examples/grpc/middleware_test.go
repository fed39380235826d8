package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/examples/internal/exampletest"
	"github.com/floodgate-go/floodgate/internal/shoppb"
)

// TestGRPCExampleMiddleware runs the example with go-grpc-middleware's
// chain configured, over loopback, the test client acting as a trusted
// proxy that forwards X-Forwarded-For.
func TestGRPCExampleMiddleware(t *testing.T) {
	out := exampletest.Start(t, run, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0",
		"-policy", "../policy.yaml", "-work", "1ms", "-redis", "",
		"-trusted-proxies", "127.0.0.1/32", "-unlimited", "/floodgate.shop.v1.Shop/Search")
	addr := out.WaitFor(t, listening, 1, 10*time.Second)[1]
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	shop := shoppb.NewShopClient(dial(t, addr))

	// selector: Search is -unlimited, so grpc-search-user (5 in a burst)
	// never sees these 20 calls.
	for i := 1; i <= 20; i++ {
		if _, err := shop.Search(as(ctx, "dave"), &shoppb.SearchRequest{Query: "lamp"}); err != nil {
			t.Fatalf("unlimited search %d: %v", i, err)
		}
	}

	// realip: ip-safety-net limits the forwarded client, not the proxy.
	forwarded := func(ip string) context.Context { return metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", ip) }
	var limited error
	for i := 1; i <= 1000 && limited == nil; i++ {
		_, err := shop.Pay(forwarded("100.64.1.7"), &shoppb.PayRequest{AmountCents: 100})
		if status.Code(err) == codes.ResourceExhausted {
			limited = err
		} else if err != nil {
			t.Fatalf("pay %d: %v", i, err)
		}
	}
	if limited == nil || !strings.Contains(limited.Error(), "ip-safety-net") {
		t.Fatalf("1000 payments from 100.64.1.7: last error %v, want ip-safety-net", limited)
	}
	if _, err := shop.Pay(forwarded("100.64.2.9"), &shoppb.PayRequest{AmountCents: 100}); err != nil {
		t.Errorf("pay from another client behind the proxy: %v, want ok", err)
	}

	// logging: each call's line carries floodgate's decision; an
	// -unlimited call's carries none.
	var denied, exempt bool
	for _, line := range strings.Split(out.String(), "\n") {
		if !strings.Contains(line, `msg="finished call"`) {
			continue
		}
		if strings.Contains(line, "grpc.method=Pay") && strings.Contains(line, "grpc.code=ResourceExhausted") &&
			strings.Contains(line, "floodgate.decision=limited") && strings.Contains(line, "floodgate.policy=ip-safety-net") &&
			strings.Contains(line, "floodgate.stage=tiers") && strings.Contains(line, "floodgate.remaining=0") {
			denied = true
		}
		if strings.Contains(line, "grpc.method=Search") {
			exempt = true
			if strings.Contains(line, "floodgate.decision") {
				t.Errorf("an -unlimited call's log line has floodgate fields: %s", line)
			}
		}
	}
	if !denied || !exempt {
		t.Errorf("log lines: denied Pay with floodgate fields %v, Search line %v; output:\n%.3000s", denied, exempt, out.String())
	}
}

func TestGRPCExampleMiddlewareFlags(t *testing.T) {
	out := exampletest.NewOutput()
	for _, tc := range []struct{ flag, value, want string }{
		{"-trusted-proxies", "10.0.0.0/8,proxy.internal", `-trusted-proxies: "proxy.internal"`},
		{"-unlimited", "/ok.Svc/Get,Search", `-unlimited: grpcmw: Exempt: "Search"`},
	} {
		err := run(t.Context(), []string{"-policy", "../policy.yaml", "-redis", "", tc.flag, tc.value}, out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: err = %v, want %s", tc.flag, tc.value, err, tc.want)
		}
	}
}
