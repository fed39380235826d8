package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

const tenPerHour = `
rules:
  - {name: per-ip, key: [ip], rate: 10/1h, algorithm: fixed_window}
rls:
  - domain: edge
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: per-ip
`

// startServe runs serve-rls with args (after -policy and -listen) until
// the test ends, and returns a client of its RateLimitService.
func startServe(t *testing.T, policyPath string, args ...string) rlsv3.RateLimitServiceClient {
	t.Helper()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx, append([]string{"serve-rls", "-policy", policyPath, "-listen", "127.0.0.1:0", "-watch", "0", "-rlqs=false"}, args...), outW, io.Discard)
		outW.Close()
	}()
	stdout := lines(outR)
	t.Cleanup(func() { cancel(); <-done })
	addr := await(t, stdout, regexp.MustCompile(`serving envoy.service.ratelimit.v3.RateLimitService on (\S+) `))[1]
	go func() {
		for range stdout { // the rest, until the command ends
		}
	}()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// oks sends n calls of one client address and counts the OK answers.
func oks(t *testing.T, c rlsv3.RateLimitServiceClient, n int) int {
	t.Helper()
	got := 0
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*extrlsv3.RateLimitDescriptor{
			{Entries: []*extrlsv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}}}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			got++
		}
	}
	return got
}

// TestServeRLSFleetShare: two serve-rls on one Redis count each other by
// default (-instances 0), so with Redis gone they admit a limit of 10
// once between them, 5 each, not 10 each; -instances 3 is a fixed count
// (3 of 10 on its own), and it joins no member set.
func TestServeRLSFleetShare(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(tenPerHour), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	srv := redistest.Start(t)
	rc := srv.Client()
	const fleetKey = "fg:fleet:{floodgate-rls}"
	a := startServe(t, path, "-redis", "redis://"+srv.Addr(), "-store-timeout", "50ms")
	b := startServe(t, path, "-redis", "redis://"+srv.Addr(), "-store-timeout", "50ms")
	// Another deployment on the same Redis, counted apart.
	startServe(t, path, "-redis", "redis://"+srv.Addr(), "-service", "other-rls")
	// Each counts 2 once it has beaten after both were in the set: its
	// entry's expiry moves past what it was when the set first held 2.
	var first map[string]float64
	deadline := time.Now().Add(30 * time.Second)
	for {
		zs, err := rc.ZRangeWithScores(ctx, fleetKey, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(zs) > 2 {
			t.Fatalf("member set %q holds %d entries: %v", fleetKey, len(zs), zs)
		}
		if len(zs) == 2 {
			if first == nil {
				first = map[string]float64{}
				for _, z := range zs {
					first[z.Member.(string)] = z.Score
				}
			} else if zs[0].Score > first[zs[0].Member.(string)] && zs[1].Score > first[zs[1].Member.(string)] {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two serve-rls did not both beat in %s within 30s: %v", fleetKey, zs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n, err := rc.ZCard(ctx, "fg:fleet:{other-rls}").Result(); err != nil || n != 1 {
		t.Fatalf("the other deployment's member set holds %d, %v; want 1", n, err)
	}
	srv.Kill()
	if got := oks(t, a, 10) + oks(t, b, 10); got != 10 {
		t.Errorf("with Redis down two serve-rls admitted %d of 20, want 10 (the limit shared by the 2 live instances)", got)
	}

	srv2 := redistest.Start(t)
	c := startServe(t, path, "-redis", "redis://"+srv2.Addr(), "-store-timeout", "50ms", "-instances", "3")
	if n, err := srv2.Client().Exists(ctx, fleetKey).Result(); err != nil || n != 0 {
		t.Fatalf("-instances 3 joined a member set: %d, %v", n, err)
	}
	srv2.Kill()
	if got := oks(t, c, 10); got != 3 {
		t.Errorf("with Redis down serve-rls -instances 3 admitted %d of 10, want 3 (10 / 3)", got)
	}
}
