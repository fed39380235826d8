package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

const policy = `
rules:
  - {name: per-ip, key: [ip], rate: 2/1h, algorithm: fixed_window}
rls:
  - domain: edge
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: per-ip
`

// lines delivers the lines written to a pipe.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// await returns the first line matching re, failing after 30 seconds.
func await(t *testing.T, ch <-chan string, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				t.Fatalf("output ended before a line matching %s", re)
			}
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-deadline:
			t.Fatalf("no line matching %s in 30s", re)
		}
	}
}

// serve-rls end to end: Redis through the fallback, real gRPC, health,
// metrics, a reload of the policy file, and a clean stop.
func TestServeRLS(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"serve-rls", "-policy", path, "-listen", "127.0.0.1:0", "-metrics", "127.0.0.1:0",
			"-redis", "redis://" + srv.Addr(), "-watch", "10ms", "-store-timeout", "1s"}, outW, errW)
		outW.Close()
		errW.Close()
	}()
	stdout, stderr := lines(outR), lines(errR)
	var (
		logMu sync.Mutex
		logs  []string
	)
	reloaded := make(chan struct{}, 4)
	go func() {
		for l := range stderr {
			logMu.Lock()
			logs = append(logs, l)
			logMu.Unlock()
			if strings.Contains(l, "policy reloaded") {
				reloaded <- struct{}{}
			}
		}
	}()
	metricsURL := await(t, stdout, regexp.MustCompile(`metrics on (http://\S+)`))[1]
	addr := await(t, stdout, regexp.MustCompile(`serving envoy.service.ratelimit.v3.RateLimitService on (\S+) \(domains edge; 1 rules; buckets in Redis at`))[1]
	<-reloaded // the watcher applies the file as it is once a second poll reads it unchanged

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	hres, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || hres.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", hres, err)
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	call := func() *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := client.ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*extrlsv3.RateLimitDescriptor{
			{Entries: []*extrlsv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if resp := call(); resp.OverallCode != want {
			t.Fatalf("call %d: %v, want %v", i, resp, want)
		}
	}
	// The budget is in Redis, under the services' key.
	if n, err := srv.Client().Exists(cctx, "fg:{ip=192.0.2.1}:per-ip:fixed_window").Result(); err != nil || n != 1 {
		t.Fatalf("redis key: %d, %v", n, err)
	}

	// A reload raises the limit on the same bucket.
	if err := os.WriteFile(path, []byte(strings.Replace(policy, "2/1h", "5/1h", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	<-reloaded
	if resp := call(); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("after the reload: %v, want OK with 2 of 5 left", resp)
	}

	res, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !bytes.Contains(body, []byte(`floodgate_decisions`)) || !bytes.Contains(body, []byte(`floodgate_policy="per-ip"`)) {
		t.Fatalf("metrics without floodgate.decisions by policy:\n%s", body)
	}

	cancel()
	if c := <-code; c != 0 {
		logMu.Lock()
		t.Fatalf("exit %d\n%s", c, strings.Join(logs, "\n"))
	}
	await(t, stdout, regexp.MustCompile(`^floodgate-rls: stopped$`))
}

func TestServeRLSBadInvocations(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n  - {name: x, key: [ip], rate: 5/minute}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve-rls"}, 2, "-policy is required"},
		{[]string{"serve-rls", "-policy", good, "-listen", "127.0.0.1:0", "-redis", "mysql://x"}, 1, "-redis: redisstore: NewClient: \"mysql://x\": redis: invalid URL scheme: mysql"},
		{[]string{"serve-rls", "-policy", bad, "-instances", "-1"}, 2, "-instances -1 is negative"},
		{[]string{"serve-rls", "-policy", bad, "-service", "a b"}, 2, `-service "a b" holds ' '`},
		{[]string{"serve-rls", "-policy", bad}, 1, `rules[0].rate: "5/minute" is not N/duration (write 5/1m), at line 2`},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{nil, 2, "usage:"},
	} {
		var out, errb bytes.Buffer
		got := run(context.Background(), c.args, &out, &errb)
		if got != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, got, errb.String(), c.code, c.want)
		}
	}
}

func TestTranslateCommand(t *testing.T) {
	td := filepath.Join("..", "..", "translate", "testdata")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"translate", "-as", "tenant=tenant", filepath.Join(td, "edge.yaml"), filepath.Join(td, "internal.yaml")}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	golden, err := os.ReadFile(filepath.Join(td, "edge.policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The golden file names the inputs without their directory.
	got := strings.ReplaceAll(out.String(), td+string(filepath.Separator), "")
	if got != string(golden) {
		t.Fatalf("translate printed:\n%s\nwant:\n%s", got, golden)
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"translate", filepath.Join(td, "unsupported.yaml")}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), `unsupported.yaml:16: descriptors[2].rate_limit.unit: "fortnight" is not a unit`) {
		t.Fatalf("unsupported: exit %d, %s", code, errb.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"translate", "-as", "novalue", "x.yaml"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `"novalue" is not KEY=SCOPE`) {
		t.Fatalf("bad -as: exit %d, %s", code, errb.String())
	}
	errb.Reset()
	out.Reset()
	if code := run(context.Background(), []string{"translate", "-consistency", "async", "-as", "tenant=tenant", filepath.Join(td, "edge.yaml")}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "consistency: async") || !strings.Contains(out.String(), "algorithm: token_bucket") || strings.Contains(out.String(), "fixed_window") {
		t.Fatalf("-consistency async: exit %d, %s\n%s", code, errb.String(), out.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"translate", "-consistency", "sometimes", filepath.Join(td, "edge.yaml")}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), `-consistency: "sometimes" is not exact, leased or async`) {
		t.Fatalf("bad -consistency: exit %d, %s", code, errb.String())
	}
	outFile := filepath.Join(t.TempDir(), "p.yaml")
	if code := run(context.Background(), []string{"translate", "-o", outFile, "-as", "tenant=tenant", filepath.Join(td, "edge.yaml")}, &out, &errb); code != 0 {
		t.Fatalf("-o: exit %d", code)
	}
	if b, err := os.ReadFile(outFile); err != nil || !bytes.Contains(b, []byte("rls:")) {
		t.Fatalf("-o wrote %q, %v", b, err)
	}
	// One domain in two files, merged with -merge-domains; detailed_metric
	// is accepted with a warning on standard error.
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	if err := os.WriteFile(a, []byte("domain: d\ndescriptors:\n  - key: x\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("domain: d\ndescriptors:\n  - key: y\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"translate", a, b}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "-merge-domains") {
		t.Fatalf("a domain twice: exit %d, %s", code, errb.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"translate", "-merge-domains", a, b}, &out, &errb); code != 0 ||
		!strings.Contains(errb.String(), "floodgate-rls translate: warning: "+a+":4: descriptors[0].detailed_metric:") || !strings.Contains(out.String(), "d.y") {
		t.Fatalf("-merge-domains: exit %d, %s\n%s", code, errb.String(), out.String())
	}
}
