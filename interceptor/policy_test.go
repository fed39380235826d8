package interceptor

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// Policies over the transports, each with a real tiers.Limiter on the
// memstore and a fake clock: several windows per rule in the RateLimit
// fields, problem bodies and QuotaFailure; header matches and header key
// scopes filled from the call; shadow policies.

func limiterAt(t *testing.T, clk *clock.Fake, policy string) *tiers.Limiter {
	t.Helper()
	p, err := tiers.Load([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := tiers.NewLimiter(store, p)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func violatedPolicies(t *testing.T, body string) []string {
	t.Helper()
	var p struct {
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return p.Violated
}

// A rule with a minute and an hour window: both in RateLimit-Policy and
// RateLimit on every response, the binding window first; a 429 names the
// window that denied.
func TestHTTPWindows(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	clk.Advance(15 * time.Second)
	lim := limiterAt(t, clk, `
rules:
  - name: plan
    match: {method: "GET /v1/items/{id}"}
    key: [ip]
    rate: [2/1m, 3/1h]
    algorithm: fixed_window
`)
	srv := muxServer(t, mustHTTP(lim))
	for i, want := range []struct {
		status            int
		policy, rl, retry []string
		violated          []string
	}{
		{200, []string{`"plan/1m";q=2;w=60, "plan/1h";q=3;w=3600`}, []string{`"plan/1m";r=1;t=45, "plan/1h";r=2;t=3585`}, nil, nil},
		{200, []string{`"plan/1m";q=2;w=60, "plan/1h";q=3;w=3600`}, []string{`"plan/1m";r=0;t=45, "plan/1h";r=1;t=3585`}, nil, nil},
		{429, []string{`"plan/1m";q=2;w=60, "plan/1h";q=3;w=3600`}, []string{`"plan/1m";r=0;t=45, "plan/1h";r=1;t=3585`}, []string{"45"}, []string{"plan/1m"}},
	} {
		res := get(t, srv, "GET", "/v1/items/1")
		if res.status != want.status {
			t.Fatalf("request %d: status %d, want %d", i, res.status, want.status)
		}
		checkHeader(t, res.header, map[string][]string{"RateLimit-Policy": want.policy, "RateLimit": want.rl, "Retry-After": want.retry})
		if want.violated != nil {
			if got := violatedPolicies(t, res.body); !slices.Equal(got, want.violated) {
				t.Errorf("request %d: violated-policies %q, want %q", i, got, want.violated)
			}
		}
	}
	// A minute on, the hour window binds (0 left after this request) and
	// then denies; the minute window, not charged by the deny, keeps 1.
	clk.Advance(time.Minute)
	res := get(t, srv, "GET", "/v1/items/1")
	checkHeader(t, res.header, map[string][]string{
		"RateLimit-Policy": {`"plan/1h";q=3;w=3600, "plan/1m";q=2;w=60`},
		"RateLimit":        {`"plan/1h";r=0;t=3525, "plan/1m";r=1;t=45`},
	})
	res = get(t, srv, "GET", "/v1/items/1")
	if res.status != 429 {
		t.Fatalf("hour deny: %d", res.status)
	}
	checkHeader(t, res.header, map[string][]string{
		"RateLimit":   {`"plan/1h";r=0;t=3525, "plan/1m";r=1;t=45`},
		"Retry-After": {"3525"},
	})
	if got := violatedPolicies(t, res.body); !slices.Equal(got, []string{"plan/1h"}) {
		t.Errorf("hour deny: violated-policies %q", got)
	}
}

const twoRulesPolicy = `
rules:
  - {name: user, key: [user], rate: [2/1m, 3/1h], algorithm: fixed_window}
  - {name: tenant, key: [tenant], rate: 2/1h, algorithm: fixed_window}
`

// Two rules denying at once, one of them by one of its windows: every
// violated window is a QuotaFailure violation, the binding one first, and
// a violated-policies entry.
func TestGRPCWindowsQuotaFailure(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	clk.Advance(15 * time.Second)
	lim := limiterAt(t, clk, twoRulesPolicy)
	fg := MustNew(WithUser(FromHeader("x-user")), WithTenant(FromHeader("x-tenant")))
	c := testpb.NewEchoClient(startBufconn(t, &echoServer{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(fg.UnaryServer(lim))}))
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-user", "u", "x-tenant", "t")
	for range 2 {
		if _, err := c.Plain(ctx, &testpb.EchoRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	var trailer metadata.MD
	_, err := c.Plain(ctx, &testpb.EchoRequest{}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("3rd: %v", err)
	}
	if got := trailer.Get(PushbackTrailer); len(got) != 1 || got[0] != "3585000" {
		t.Errorf("pushback %q, want the binding tenant window's 3585 s", got)
	}
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		if q, ok := d.(*errdetails.QuotaFailure); ok {
			qf = q
		}
	}
	want := []*errdetails.QuotaFailure_Violation{
		{Subject: "tenant", Description: "rate limit of 2 per 1h0m0s exceeded", QuotaId: "tenant", QuotaValue: 2},
		{Subject: "user/1m", Description: "rate limit of 2 per 1m0s exceeded", QuotaId: "user/1m", QuotaValue: 2},
	}
	if qf == nil || len(qf.GetViolations()) != len(want) {
		t.Fatalf("QuotaFailure = %v, want %v", qf, want)
	}
	for i, v := range qf.GetViolations() {
		w := want[i]
		if v.GetSubject() != w.Subject || v.GetDescription() != w.Description || v.GetQuotaId() != w.QuotaId || v.GetQuotaValue() != w.QuotaValue {
			t.Errorf("violation %d = %v, want %v", i, v, w)
		}
	}
}

func TestHTTPTwoRulesViolated(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	clk.Advance(15 * time.Second)
	lim := limiterAt(t, clk, twoRulesPolicy)
	srv := muxServer(t, mustHTTP(lim, WithUser(FromHeader("x-user")), WithTenant(FromHeader("x-tenant"))))
	for range 2 {
		get(t, srv, "GET", "/v1/items/1", "x-user", "u", "x-tenant", "t")
	}
	res := get(t, srv, "GET", "/v1/items/1", "x-user", "u", "x-tenant", "t")
	if res.status != 429 {
		t.Fatalf("3rd: %d", res.status)
	}
	checkHeader(t, res.header, map[string][]string{
		"RateLimit-Policy": {`"tenant";q=2;w=3600, "user/1m";q=2;w=60`},
		"RateLimit":        {`"tenant";r=0;t=3585, "user/1m";r=0;t=45`},
		"Retry-After":      {"3585"},
	})
	if got := violatedPolicies(t, res.body); !slices.Equal(got, []string{"tenant", "user/1m"}) {
		t.Errorf("violated-policies %q", got)
	}
}

const headerPolicy = `
rules:
  - name: mobile
    match: {header: {X-Client-Type: [mobile]}}
    key: [ip]
    rate: 1/1m
  - name: region
    key: [ip, header:x-region]
    rate: 2/1m
`

// The policy's headers, and only those, reach the Request; a header match
// selects a rule, a header scope splits its buckets, whatever bytes the
// value holds.
func TestHTTPHeaderMatchAndScope(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	lim := limiterAt(t, clk, headerPolicy)
	rec := &stage{}
	srv := muxServer(t, mustHTTP(floodgate.Chain{lim, rec}))
	res := get(t, srv, "GET", "/v1/items/1", "X-Client-Type", "mobile", "X-Region", "eu", "X-Other", "secret", "X-Client-Type", "desktop")
	if res.status != 200 {
		t.Fatalf("first: %d %s", res.status, res.body)
	}
	want := []floodgate.Header{{Name: "x-client-type", Value: "mobile"}, {Name: "x-region", Value: "eu"}}
	if got := rec.requests()[0].Headers; !slices.Equal(got, want) {
		t.Errorf("Request.Headers = %q, want the first value of the policy's two headers only", got)
	}
	// mobile allows 1 a minute: the second mobile request is denied.
	if res := get(t, srv, "GET", "/v1/items/1", "X-Client-Type", "mobile", "X-Region", "us"); res.status != 429 || !strings.Contains(res.body, `"mobile"`) {
		t.Fatalf("second mobile: %d %s", res.status, res.body)
	}
	// Not mobile: only region applies, one bucket per value.
	huge := strings.Repeat("ü", 4096)
	for _, region := range []string{"eu", "us", "}{:=#", huge} {
		n := 2
		if region == "eu" {
			n = 1 // one used above
		}
		for i := range n {
			if res := get(t, srv, "GET", "/v1/items/1", "X-Region", region); res.status != 200 {
				t.Fatalf("region %.12q request %d: %d", region, i, res.status)
			}
		}
		if res := get(t, srv, "GET", "/v1/items/1", "X-Region", region); res.status != 429 {
			t.Fatalf("region %.12q over its limit: %d", region, res.status)
		}
	}
	// No x-region: the region rule is skipped, the call passes.
	if res := get(t, srv, "GET", "/v1/items/1"); res.status != 200 {
		t.Fatalf("without headers: %d", res.status)
	}
	last := rec.requests()[len(rec.requests())-1]
	if last.Headers != nil {
		t.Errorf("without headers: Request.Headers = %q, want nil", last.Headers)
	}
}

func TestGRPCHeaderMatchAndScope(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	lim := limiterAt(t, clk, headerPolicy)
	rec := &stage{}
	c := testpb.NewEchoClient(startLoopback(t, &echoServer{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(mustUnary(floodgate.Chain{lim, rec}, WithStrictIdentity()))}))
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-client-type", "mobile", "x-region", "eu", "x-other", "secret")
	if _, err := c.Plain(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	want := []floodgate.Header{{Name: "x-client-type", Value: "mobile"}, {Name: "x-region", Value: "eu"}}
	if got := rec.requests()[0].Headers; !slices.Equal(got, want) {
		t.Errorf("Request.Headers = %q, want %q", got, want)
	}
	_, err := c.Plain(ctx, &testpb.EchoRequest{})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), `"mobile"`) {
		t.Fatalf("second mobile: %v", err)
	}
	// gRPC metadata values are printable ASCII (grpc-go refuses others).
	for _, region := range []string{"us", "}{:=#", strings.Repeat("z~", 4096)} {
		rctx := metadata.AppendToOutgoingContext(testCtx(t), "x-region", region)
		for i := range 2 {
			if _, err := c.Plain(rctx, &testpb.EchoRequest{}); err != nil {
				t.Fatalf("region %.12q request %d: %v", region, i, err)
			}
		}
		if _, err := c.Plain(rctx, &testpb.EchoRequest{}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("region %.12q over its limit: %v", region, err)
		}
	}
}

// A reload that names a new header applies at the next call: the
// interceptor reads the policy's headers on every call.
func TestHeadersFollowReload(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	lim := limiterAt(t, clk, "rules:\n  - {name: all, key: [ip], rate: 100/1m}\n")
	rec := &stage{}
	srv := muxServer(t, mustHTTP(floodgate.Chain{lim, rec}))
	get(t, srv, "GET", "/v1/items/1", "X-Tenant-Plan", "gold")
	if h := rec.requests()[0].Headers; h != nil {
		t.Fatalf("before the reload: Headers = %q", h)
	}
	p, err := tiers.Load([]byte("rules:\n  - {name: gold, match: {header: {x-tenant-plan: gold}}, key: [ip], rate: 1/1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	if res := get(t, srv, "GET", "/v1/items/1", "X-Tenant-Plan", "gold"); res.status != 200 {
		t.Fatalf("after the reload, first: %d", res.status)
	}
	if res := get(t, srv, "GET", "/v1/items/1", "X-Tenant-Plan", "gold"); res.status != 429 {
		t.Fatalf("after the reload, second: %d, want the gold rule to deny", res.status)
	}
	if h := rec.requests()[1].Headers; !slices.Equal(h, []floodgate.Header{{Name: "x-tenant-plan", Value: "gold"}}) {
		t.Errorf("after the reload: Headers = %q", h)
	}
}

// A shadow policy never denies and sends no quota fields; switching it
// off by reload enforces the same buckets. (A request outside a rule's
// enforce_percent share is the same kind of shadow denial: package tiers
// tests which requests those are.)
func TestHTTPShadowPolicy(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	const rules = "rules:\n  - {name: per-ip, key: [ip], rate: 1/1m}\n"
	lim := limiterAt(t, clk, "shadow: true\n"+rules)
	obs := &lastDecision{}
	srv := muxServer(t, mustHTTP(lim, WithObserver(obs)))
	for i := range 3 {
		res := get(t, srv, "GET", "/v1/items/1")
		if res.status != 200 {
			t.Fatalf("shadow %d: %d", i, res.status)
		}
		checkHeader(t, res.header, map[string][]string{"RateLimit-Policy": nil, "RateLimit": nil})
	}
	if d := obs.get(); !d.Allowed || !d.Shadow || d.Policy != "per-ip" {
		t.Errorf("shadow decision %+v", d)
	}
	p, err := tiers.Load([]byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	if res := get(t, srv, "GET", "/v1/items/1"); res.status != 429 {
		t.Fatalf("enforced: %d", res.status)
	}
}

// Header names are case-insensitive: a policy may write them in any case,
// and a client may send them in any case.
func TestHeaderNamesCaseInsensitive(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	lim := limiterAt(t, clk, "rules:\n  - {name: m, match: {header: {X-MiXeD: [v]}}, rate: 1/1m}\n")
	mw := mustHTTP(lim)
	h := mw(http.HandlerFunc(okHandler))
	for i, want := range []int{200, 429} {
		req := httptest.NewRequest("GET", "/x", nil)
		req.Pattern = "GET /x"
		req.Header.Set("x-mixed", "v")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d", i, w.Code, want)
		}
	}
}
