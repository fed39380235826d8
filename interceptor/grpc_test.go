package interceptor

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

func registerExtra(srv *grpc.Server) {
	healthpb.RegisterHealthServer(srv, health.NewServer())
}

func deny(d floodgate.Decision) func(*floodgate.Request) (floodgate.Decision, error) {
	return func(*floodgate.Request) (floodgate.Decision, error) { return d, nil }
}

func unaryServer(t *testing.T, e *echoServer, a ...grpc.UnaryServerInterceptor) testpb.EchoClient {
	t.Helper()
	return testpb.NewEchoClient(startBufconn(t, e, []grpc.ServerOption{grpc.ChainUnaryInterceptor(a...)}))
}

// checkDetails asserts the status details equal want, in order, exactly.
func checkDetails(t *testing.T, st *status.Status, want ...proto.Message) {
	t.Helper()
	got := st.Details()
	if len(got) != len(want) {
		t.Fatalf("details = %v, want %d details", got, len(want))
	}
	for i := range want {
		g, ok := got[i].(proto.Message)
		if !ok {
			t.Fatalf("detail %d: %v", i, got[i])
		}
		if !proto.Equal(g, want[i]) {
			t.Errorf("detail %d = %v, want %v", i, g, want[i])
		}
	}
}

func TestUnaryDenyTiers(t *testing.T) {
	t.Parallel()
	s := &stage{decide: deny(floodgate.Decision{
		Stage: floodgate.StageTiers, Source: floodgate.SourceStore, Policy: "search",
		Limit: 100, Window: time.Minute, Remaining: 0, Reset: 30 * time.Second, RetryAfter: 1500 * time.Millisecond,
	})}
	c := unaryServer(t, &echoServer{}, mustUnary(s, WithDomain("search.example.com")))
	var trailer metadata.MD
	_, err := c.Plain(testCtx(t), &testpb.EchoRequest{Message: "x"}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("code = %v, want ResourceExhausted", st.Code())
	}
	if want := `rate limit exceeded (policy "search"); retry after 1.5s`; st.Message() != want {
		t.Errorf("message = %q, want %q", st.Message(), want)
	}
	checkDetails(t, st,
		&errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Domain: "search.example.com", Metadata: map[string]string{
			"stage": "tiers", "policy": "search", "limit": "100", "window_seconds": "60",
		}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject: "search", Description: "rate limit of 100 per 1m0s exceeded", QuotaId: "search", QuotaValue: 100,
		}}},
	)
	if got := trailer.Get(PushbackTrailer); len(got) != 1 || got[0] != "1500" {
		t.Errorf("trailer %s = %q, want [1500]", PushbackTrailer, got)
	}
	if s.held.Load() != 0 {
		t.Errorf("deny held %d", s.held.Load())
	}
}

func TestUnaryDenyConcurrencyShedderHidden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		d       floodgate.Decision
		code    codes.Code
		msg     string
		trailer string
		details []proto.Message
	}{
		{
			name: "concurrency",
			d:    floodgate.Decision{Stage: floodgate.StageConcurrency, Policy: "concurrency", Limit: 20, RetryAfter: 10 * time.Millisecond},
			code: codes.ResourceExhausted, msg: `concurrency limit exceeded (policy "concurrency"); retry after 10ms`, trailer: "10",
			details: []proto.Message{
				&errdetails.ErrorInfo{Reason: "CONCURRENCY_LIMIT_EXCEEDED", Domain: DefaultDomain, Metadata: map[string]string{"stage": "concurrency", "policy": "concurrency", "limit": "20"}},
				&errdetails.RetryInfo{RetryDelay: durationpb.New(10 * time.Millisecond)},
				&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "concurrency", Description: "concurrency limit of 20 in flight reached", QuotaId: "concurrency", QuotaValue: 20}}},
			},
		},
		{
			name: "shedder",
			d:    floodgate.Decision{Stage: floodgate.StageShedder, Policy: "shedder", Limit: 64, RetryAfter: 1234567 * time.Microsecond},
			code: codes.Unavailable, msg: `server overloaded: request shed (policy "shedder"); retry after 1.234567s`, trailer: "1235",
			details: []proto.Message{
				&errdetails.ErrorInfo{Reason: "LOAD_SHED", Domain: DefaultDomain, Metadata: map[string]string{"stage": "shedder", "policy": "shedder", "limit": "64"}},
				&errdetails.RetryInfo{RetryDelay: durationpb.New(1234567 * time.Microsecond)},
			},
		},
		{
			name: "hidden quota",
			d:    floodgate.Decision{Stage: floodgate.StageTiers, Policy: "login", Limit: 5, Window: time.Minute, RetryAfter: 2 * time.Second, HideQuota: true},
			code: codes.ResourceExhausted, msg: `rate limit exceeded; retry after 2s`, trailer: "2000",
			details: []proto.Message{
				&errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Domain: DefaultDomain, Metadata: map[string]string{"stage": "tiers"}},
				&errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)},
			},
		},
		{
			name: "cannot be cured by waiting",
			d:    floodgate.Decision{Stage: floodgate.StageTiers, Policy: "search", Limit: 5, Window: time.Second},
			code: codes.ResourceExhausted, msg: `rate limit exceeded (policy "search")`, trailer: "-1",
			details: []proto.Message{
				&errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Domain: DefaultDomain, Metadata: map[string]string{"stage": "tiers", "policy": "search", "limit": "5", "window_seconds": "1"}},
				&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "search", Description: "rate limit of 5 per 1s exceeded", QuotaId: "search", QuotaValue: 5}}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := unaryServer(t, &echoServer{}, mustUnary(&stage{decide: deny(tc.d)}))
			var trailer metadata.MD
			_, err := c.Plain(testCtx(t), &testpb.EchoRequest{}, grpc.Trailer(&trailer))
			st := status.Convert(err)
			if st.Code() != tc.code || st.Message() != tc.msg {
				t.Fatalf("status = %v %q, want %v %q", st.Code(), st.Message(), tc.code, tc.msg)
			}
			checkDetails(t, st, tc.details...)
			if got := trailer.Get(PushbackTrailer); len(got) != 1 || got[0] != tc.trailer {
				t.Errorf("trailer = %q, want %q", got, tc.trailer)
			}
		})
	}
}

func TestUnaryAllowErrorProceeds(t *testing.T) {
	t.Parallel()
	s := &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Source: floodgate.SourceFailOpen}, errors.New("store down")
	}}
	c := unaryServer(t, &echoServer{}, mustUnary(s))
	resp, err := c.Plain(testCtx(t), &testpb.EchoRequest{Message: "hi"})
	if err != nil || resp.GetMessage() != "hi" {
		t.Fatalf("Plain = %v, %v; want hi, nil", resp, err)
	}
	if s.dones.Load() != 1 {
		t.Errorf("dones = %d, want 1", s.dones.Load())
	}
}

func TestUnaryChainBuildsRequestOnceAndReleases(t *testing.T) {
	t.Parallel()
	stages := []*stage{{}, {}, {}}
	var ics []grpc.UnaryServerInterceptor
	for _, s := range stages {
		ics = append(ics, mustUnary(s))
	}
	// A fourth stage that denies after the first three passed.
	denier := &stage{decide: deny(floodgate.Decision{Stage: floodgate.StageTiers, RetryAfter: time.Second})}
	c := unaryServer(t, &echoServer{}, append(ics, mustUnary(denier))...)
	for range 2 {
		_, err := c.Plain(testCtx(t), &testpb.EchoRequest{})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("err = %v", err)
		}
	}
	for i, s := range stages {
		if s.admits.Load() != 2 || s.dones.Load() != 2 || s.held.Load() != 0 {
			t.Errorf("stage %d: admits %d dones %d held %d, want 2 2 0", i, s.admits.Load(), s.dones.Load(), s.held.Load())
		}
	}
	r0, r1, r2, r3 := stages[0].requests(), stages[1].requests(), stages[2].requests(), denier.requests()
	for call := range 2 {
		if r0[call] != r1[call] || r1[call] != r2[call] || r2[call] != r3[call] {
			t.Errorf("call %d: stages saw different Requests; want one built by the first interceptor", call)
		}
	}
	if r0[0] == r0[1] {
		t.Error("two calls shared one Request")
	}
	if r0[0].Method != "/floodgate.test.v1.Echo/Plain" {
		t.Errorf("Method = %q", r0[0].Method)
	}
}

func TestUnaryDoneOnPanic(t *testing.T) {
	t.Parallel()
	s := &stage{}
	recovery := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Error(codes.Aborted, "recovered")
			}
		}()
		return h(ctx, req)
	}
	c := unaryServer(t, &echoServer{panicOn: "boom"}, recovery, mustUnary(s))
	_, err := c.Plain(testCtx(t), &testpb.EchoRequest{Message: "boom"})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("err = %v, want the recovered panic", err)
	}
	if s.dones.Load() != 1 || s.held.Load() != 0 {
		t.Errorf("dones %d held %d, want 1 0", s.dones.Load(), s.held.Load())
	}
}

func TestHealthAndSkipNeverLimited(t *testing.T) {
	t.Parallel()
	s := &stage{decide: deny(floodgate.Decision{Stage: floodgate.StageShedder, RetryAfter: time.Second})}
	cc := startBufconn(t, &echoServer{}, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(mustUnary(s, WithSkip(func(m string) bool { return m == "/floodgate.test.v1.Echo/Expensive" }))),
	})
	resp, err := healthpb.NewHealthClient(cc).Check(testCtx(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health Check = %v, %v", resp, err)
	}
	if _, err := testpb.NewEchoClient(cc).Expensive(testCtx(t), &testpb.EchoRequest{}); err != nil {
		t.Fatalf("skipped method: %v", err)
	}
	if _, err := testpb.NewEchoClient(cc).Plain(testCtx(t), &testpb.EchoRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Plain: %v, want Unavailable", err)
	}
	if s.admits.Load() != 1 {
		t.Errorf("admits = %d, want 1 (only Plain)", s.admits.Load())
	}
}

func TestAnnotationsAndPrecedence(t *testing.T) {
	t.Parallel()
	const exp, plain = "/floodgate.test.v1.Echo/Expensive", "/floodgate.test.v1.Echo/Plain"
	mo, ok := annotationFor(exp)
	if !ok || mo != (floodgate.MethodOptions{Cost: 10, Priority: floodgate.PriorityCritical}) {
		t.Fatalf("annotationFor(%s) = %+v, %v", exp, mo, ok)
	}
	if _, ok := annotationFor(plain); ok {
		t.Fatal("Plain has no annotation")
	}
	for _, m := range []string{"", "/", "x", "/nope.Svc/M", "/floodgate.test.v1.Echo/Nope", "/floodgate.test.v1.EchoRequest/X"} {
		if _, ok := annotationFor(m); ok {
			t.Errorf("annotationFor(%q) found something", m)
		}
	}

	type want struct {
		cost int64
		prio floodgate.Priority
	}
	goMap := map[string]floodgate.MethodOptions{exp: {Cost: 3}, plain: {Cost: 2, Priority: floodgate.PriorityWrite}}
	for _, tc := range []struct {
		name   string
		opts   []Option
		policy map[string]floodgate.MethodOptions // the wrapped stage's methods:
		md     []string
		exp    want
		plain  want
	}{
		{"annotation", nil, nil, nil, want{10, floodgate.PriorityCritical}, want{0, floodgate.PriorityUnspecified}},
		{"no annotations", []Option{WithoutAnnotations()}, nil, nil, want{0, 0}, want{0, 0}},
		{"map over annotation", []Option{WithMethods(goMap)}, nil, nil, want{3, floodgate.PriorityCritical}, want{2, floodgate.PriorityWrite}},
		{"policy over map", []Option{WithMethods(goMap)}, map[string]floodgate.MethodOptions{exp: {Cost: 7, Priority: floodgate.PriorityRead}},
			nil, want{7, floodgate.PriorityRead}, want{2, floodgate.PriorityWrite}},
		{"policy cost, annotation priority", nil, map[string]floodgate.MethodOptions{exp: {Cost: 7}},
			nil, want{7, floodgate.PriorityCritical}, want{0, floodgate.PriorityUnspecified}},
		{"trusted priority header", []Option{WithPriorityHeader("x-priority")}, nil, []string{"x-priority", "test"},
			want{10, floodgate.PriorityTest}, want{0, floodgate.PriorityTest}},
		{"trusted priority header over policy", []Option{WithPriorityHeader("x-priority")},
			map[string]floodgate.MethodOptions{exp: {Cost: 7, Priority: floodgate.PriorityRead}}, []string{"x-priority", "test"},
			want{7, floodgate.PriorityTest}, want{0, floodgate.PriorityTest}},
		{"bad priority header ignored", []Option{WithPriorityHeader("x-priority")}, nil, []string{"x-priority", "urgent"},
			want{10, floodgate.PriorityCritical}, want{0, floodgate.PriorityUnspecified}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &stage{}
			var a floodgate.Admitter = s
			if tc.policy != nil {
				a = &policyStage{stage: s, methods: tc.policy}
			}
			c := unaryServer(t, &echoServer{}, mustUnary(a, tc.opts...))
			ctx := testCtx(t)
			if tc.md != nil {
				ctx = metadata.AppendToOutgoingContext(ctx, tc.md...)
			}
			if _, err := c.Expensive(ctx, &testpb.EchoRequest{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Plain(ctx, &testpb.EchoRequest{}); err != nil {
				t.Fatal(err)
			}
			rs := s.requests()
			if got := (want{rs[0].Cost, rs[0].Priority}); got != tc.exp {
				t.Errorf("Expensive: %+v, want %+v", got, tc.exp)
			}
			if got := (want{rs[1].Cost, rs[1].Priority}); got != tc.plain {
				t.Errorf("Plain: %+v, want %+v", got, tc.plain)
			}
		})
	}
}

// TestMethodPrecedenceWiring: however a chain is wired — stage interceptors
// made by one Interceptor, one interceptor around a floodgate.Chain, or the
// same chain as HTTP middleware — every stage sees the cost and priority
// resolved in the one documented order (policy, Go map, annotation); and
// stages behind interceptors of separate New calls still see one Request.
func TestMethodPrecedenceWiring(t *testing.T) {
	const exp, plain = "/floodgate.test.v1.Echo/Expensive", "/floodgate.test.v1.Echo/Plain"
	type seen struct {
		cost int64
		prio floodgate.Priority
	}
	policy := map[string]floodgate.MethodOptions{exp: {Cost: 7}, plain: {Priority: floodgate.PriorityRead}}
	goMap := map[string]floodgate.MethodOptions{exp: {Cost: 3, Priority: floodgate.PriorityWrite}, plain: {Cost: 2, Priority: floodgate.PriorityWrite}}
	// Expensive: cost from the policy, priority from the map (the policy
	// leaves it unset) — not the annotation's critical. Plain: cost from
	// the map, priority from the policy.
	want := map[string]seen{exp: {7, floodgate.PriorityWrite}, plain: {2, floodgate.PriorityRead}}
	opts := []Option{WithMethods(goMap)}

	check := func(t *testing.T, stages ...*stage) {
		t.Helper()
		for si, s := range stages {
			rs := s.requests()
			if len(rs) != 2 {
				t.Fatalf("stage %d saw %d requests, want 2", si, len(rs))
			}
			for j, m := range []string{exp, plain} {
				if got := (seen{rs[j].Cost, rs[j].Priority}); got != want[m] {
					t.Errorf("stage %d, %s: %+v, want %+v", si, m, got, want[m])
				}
			}
		}
	}
	callBoth := func(t *testing.T, c testpb.EchoClient) {
		t.Helper()
		for _, call := range []func(context.Context, *testpb.EchoRequest, ...grpc.CallOption) (*testpb.EchoResponse, error){c.Expensive, c.Plain} {
			if _, err := call(testCtx(t), &testpb.EchoRequest{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("one interceptor per stage", func(t *testing.T) {
		shed, lim := &stage{}, &stage{}
		fg := MustNew(opts...)
		// The shedder's interceptor is made before the limiter's and still
		// resolves the limiter's policy.
		c := unaryServer(t, &echoServer{}, fg.UnaryServer(shed), fg.UnaryServer(&policyStage{stage: lim, methods: policy}))
		callBoth(t, c)
		check(t, shed, lim)
		if shed.requests()[0] != lim.requests()[0] {
			t.Error("stages of one Interceptor decided on different Requests")
		}
	})
	t.Run("one interceptor around a chain", func(t *testing.T) {
		shed, lim := &stage{}, &stage{}
		c := unaryServer(t, &echoServer{}, mustUnary(floodgate.Chain{shed, &policyStage{stage: lim, methods: policy}}, opts...))
		callBoth(t, c)
		check(t, shed, lim)
	})
	t.Run("one interceptor around a wrapped chain", func(t *testing.T) {
		// The observer option (and otel's TrackInFlight, or a user's
		// wrapper) wraps each stage: the interceptor looks through the
		// wrapper for the policy.
		shed, lim := &stage{}, &stage{}
		var observed int
		obs := floodgate.ObserverFunc(func(context.Context, *floodgate.Request, floodgate.Decision, error) { observed++ })
		c := unaryServer(t, &echoServer{}, mustUnary(floodgate.Chain{shed, &unwrapper{&policyStage{stage: lim, methods: policy}}}, append(opts, WithObserver(obs))...))
		callBoth(t, c)
		check(t, shed, lim)
		if observed != 4 {
			t.Errorf("%d decisions observed, want 4 (2 calls x 2 stages)", observed)
		}
	})
	t.Run("HTTP around a chain", func(t *testing.T) {
		shed, lim := &stage{}, &stage{}
		httpWant := map[string]floodgate.MethodOptions{"GET /e": {Cost: 7}, "GET /p": {Priority: floodgate.PriorityRead}}
		mw := mustHTTP(floodgate.Chain{shed, &policyStage{stage: lim, methods: httpWant}},
			WithMethods(map[string]floodgate.MethodOptions{"GET /e": {Cost: 3, Priority: floodgate.PriorityWrite}, "GET /p": {Cost: 2, Priority: floodgate.PriorityWrite}}))
		mux := http.NewServeMux()
		ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
		mux.Handle("GET /e", mw(ok))
		mux.Handle("GET /p", mw(ok))
		for _, path := range []string{"/e", "/p"} {
			mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
		}
		check(t, shed, lim)
	})
	t.Run("separate interceptors decide on one Request", func(t *testing.T) {
		// Mis-wired: each stage's interceptor has its own New. The first
		// builds the Request, without the policy it does not wrap, and the
		// limiter's interceptor reuses it: shedder and limiter see one
		// cost and one priority (the map's), and the limiter's
		// interceptor warns that its options do not apply.
		logs := captureSlog(t)
		shed, lim := &stage{}, &stage{}
		c := unaryServer(t, &echoServer{}, mustUnary(shed, opts...), mustUnary(&policyStage{stage: lim, methods: policy}, opts...))
		callBoth(t, c)
		for _, s := range []*stage{shed, lim} {
			rs := s.requests()
			if len(rs) != 2 {
				t.Fatalf("stage saw %d requests, want 2", len(rs))
			}
			for j, m := range []string{exp, plain} {
				want := seen{goMap[m].Cost, goMap[m].Priority}
				if got := (seen{rs[j].Cost, rs[j].Priority}); got != want {
					t.Errorf("%s: %+v, want the first interceptor's %+v", m, got, want)
				}
			}
		}
		if shed.requests()[0] != lim.requests()[0] || shed.requests()[1] != lim.requests()[1] {
			t.Error("the stages of separate interceptors decided on different Requests")
		}
		if out := logs.String(); !strings.Contains(out, "request options do not apply") {
			t.Errorf("no warning that the limiter's options do not apply; log:\n%s", out)
		}
	})
}

// unwrapper is a user's wrapper of a stage that follows floodgate's unwrap
// convention and offers nothing itself.
type unwrapper struct{ next floodgate.Admitter }

func (u *unwrapper) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	return u.next.Admit(ctx, r)
}

func (u *unwrapper) Unwrap() floodgate.Admitter { return u.next }

// policyStage is a stage with per-method options, as a *tiers.Limiter has.
type policyStage struct {
	*stage
	methods map[string]floodgate.MethodOptions
}

func (p *policyStage) MethodOptions(m string) (floodgate.MethodOptions, bool) {
	o, ok := p.methods[m]
	return o, ok
}

func TestGRPCIdentity(t *testing.T) {
	t.Parallel()
	claims := func(ctx context.Context) (map[string]any, bool) {
		// Stands in for auth middleware that verified a JWT and stored its
		// claims; here the "verified" claims come from a metadata value.
		if v := metadata.ValueFromIncomingContext(ctx, "test-verified-sub"); len(v) == 1 {
			return map[string]any{"sub": v[0], "tenant": "acme", "n": float64(42)}, true
		}
		return nil, false
	}
	for _, tc := range []struct {
		name    string
		trusted []string
		md      []string
		ip      string
	}{
		{"untrusted peer: XFF ignored", nil, []string{"x-forwarded-for", "1.2.3.4"}, "127.0.0.1"},
		{"untrusted peer: other CIDR", []string{"10.0.0.0/8"}, []string{"x-forwarded-for", "1.2.3.4"}, "127.0.0.1"},
		{"trusted peer", []string{"127.0.0.1/32"}, []string{"x-forwarded-for", "1.2.3.4"}, "1.2.3.4"},
		{"trusted chain", []string{"127.0.0.1", "10.0.0.0/8"}, []string{"x-forwarded-for", "6.6.6.6, 1.2.3.4, 10.1.2.3"}, "1.2.3.4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &stage{}
			opts := []Option{
				WithUser(FromClaims(claims, "sub")), WithTenant(FromClaims(claims, "tenant")),
				WithAPIKey(FromHeader("X-API-Key")), WithTier(FromHeader("x-tier")),
			}
			if tc.trusted != nil {
				opts = append(opts, WithTrustedProxies(tc.trusted...))
			}
			cc := startLoopback(t, &echoServer{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(mustUnary(s, opts...))})
			ctx := metadata.AppendToOutgoingContext(testCtx(t), append(tc.md, "test-verified-sub", "u1", "x-api-key", "k1", "x-tier", "pro")...)
			if _, err := testpb.NewEchoClient(cc).Plain(ctx, &testpb.EchoRequest{}); err != nil {
				t.Fatal(err)
			}
			r := s.requests()[0]
			want := floodgate.Identity{User: "u1", Tenant: "acme", APIKey: "k1", IP: netip.MustParseAddr(tc.ip)}
			if r.Identity != want || r.Tier != "pro" {
				t.Errorf("identity %+v tier %q, want %+v pro", r.Identity, r.Tier, want)
			}
		})
	}
}

func TestStreamReleasesOnEndAndCancel(t *testing.T) {
	t.Parallel()
	s := &stage{}
	e := &echoServer{streamStarted: make(chan struct{}, 4)}
	cc := startBufconn(t, e, []grpc.ServerOption{grpc.ChainStreamInterceptor(mustStream(s))})
	c := testpb.NewEchoClient(cc)

	// A stream that ends normally.
	st, err := c.ServerStream(testCtx(t), &testpb.EchoRequest{Message: "m"})
	if err != nil {
		t.Fatal(err)
	}
	<-e.streamStarted
	n := 0
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
		n++
	}
	if n != 3 {
		t.Fatalf("received %d, want 3", n)
	}
	waitFor(t, "stream slot release", func() bool { return s.held.Load() == 0 })

	// A bidi stream the client cancels while the server holds it open.
	ctx, cancel := context.WithCancel(testCtx(t))
	bs, err := c.Bidi(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := bs.Send(&testpb.EchoRequest{Message: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.Recv(); err != nil {
		t.Fatal(err)
	}
	<-e.streamStarted
	if s.held.Load() != 1 {
		t.Fatalf("held = %d while the stream is open, want 1", s.held.Load())
	}
	cancel()
	waitFor(t, "slot release after cancel", func() bool { return s.held.Load() == 0 })
	if s.admits.Load() != 2 || s.dones.Load() != 2 {
		t.Errorf("admits %d dones %d, want 2 2 (charged once per stream)", s.admits.Load(), s.dones.Load())
	}
}

func TestStreamBlockedHandlerReleasedOnCancel(t *testing.T) {
	t.Parallel()
	s := &stage{}
	e := &echoServer{streamStarted: make(chan struct{}, 1), block: true}
	c := testpb.NewEchoClient(startLoopback(t, e, []grpc.ServerOption{grpc.ChainStreamInterceptor(mustStream(s))}))
	ctx, cancel := context.WithCancel(testCtx(t))
	if _, err := c.ServerStream(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	<-e.streamStarted
	if s.held.Load() != 1 {
		t.Fatalf("held = %d, want 1", s.held.Load())
	}
	cancel()
	waitFor(t, "release after cancel", func() bool { return s.held.Load() == 0 && s.dones.Load() == 1 })
}

func TestStreamDenyAndPerMessage(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	s := &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
		// Open + 2 messages pass; the third message is denied.
		if n.Add(1) <= 3 {
			return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers}, nil
		}
		return floodgate.Decision{Stage: floodgate.StageTiers, Policy: "msgs", Limit: 3, Window: time.Second, RetryAfter: 250 * time.Millisecond}, nil
	}}
	c := testpb.NewEchoClient(startBufconn(t, &echoServer{}, []grpc.ServerOption{grpc.ChainStreamInterceptor(mustStream(s, WithPerMessage()))}))
	bs, err := c.Bidi(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := bs.Send(&testpb.EchoRequest{Message: "m"}); err != nil {
			t.Fatal(err)
		}
		if _, err := bs.Recv(); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	_ = bs.Send(&testpb.EchoRequest{Message: "m"})
	_, err = bs.Recv()
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || st.Message() != `rate limit exceeded (policy "msgs"); retry after 250ms` {
		t.Fatalf("third message: %v", err)
	}
	if got := bs.Trailer().Get(PushbackTrailer); len(got) != 1 || got[0] != "250" {
		t.Errorf("trailer = %q", got)
	}
	waitFor(t, "release", func() bool { return s.held.Load() == 0 })
	if s.admits.Load() != 4 || s.dones.Load() != 3 {
		t.Errorf("admits %d dones %d, want 4 3", s.admits.Load(), s.dones.Load())
	}

	// A stream denied when it opens ends with the denial and the trailer.
	d := &stage{decide: deny(floodgate.Decision{Stage: floodgate.StageShedder, RetryAfter: 40 * time.Millisecond})}
	c = testpb.NewEchoClient(startBufconn(t, &echoServer{}, []grpc.ServerOption{grpc.ChainStreamInterceptor(mustStream(d))}))
	ss, err := c.ServerStream(testCtx(t), &testpb.EchoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ss.Recv()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("denied stream: %v", err)
	}
	if got := ss.Trailer().Get(PushbackTrailer); len(got) != 1 || got[0] != "40" {
		t.Errorf("trailer = %q", got)
	}
}

func TestObserverReportsEveryStageOnce(t *testing.T) {
	t.Parallel()
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	var got []string
	obs := floodgate.ObserverFunc(func(_ context.Context, r *floodgate.Request, d floodgate.Decision, err error) {
		<-mu
		got = append(got, string(d.Stage)+"/"+boolStr(d.Allowed))
		mu <- struct{}{}
	})
	chain := floodgate.Chain{
		&stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
			return floodgate.Decision{Allowed: true, Stage: floodgate.StageShedder}, nil
		}},
		&stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
			return floodgate.Decision{Allowed: true, Stage: floodgate.StageConcurrency}, nil
		}},
		&stage{decide: deny(floodgate.Decision{Stage: floodgate.StageTiers, RetryAfter: time.Second})},
	}
	// Two observers: each is told of every decision, in order.
	second := floodgate.ObserverFunc(func(_ context.Context, r *floodgate.Request, d floodgate.Decision, err error) {
		<-mu
		got = append(got, "2:"+string(d.Stage))
		mu <- struct{}{}
	})
	c := unaryServer(t, &echoServer{}, mustUnary(chain, WithObserver(obs, second)))
	_, _ = c.Plain(testCtx(t), &testpb.EchoRequest{})
	<-mu
	if strings.Join(got, ",") != "shedder/true,2:shedder,concurrency/true,2:concurrency,tiers/false,2:tiers" {
		t.Errorf("observed %v", got)
	}
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	_, err := New(WithTrustedProxies("10.0.0.0/33", "nope"), WithDomain(""), WithMethods(map[string]floodgate.MethodOptions{"/a/b": {Cost: -1}}), WithObserver(nil), nil)
	if err == nil {
		t.Fatal("New accepted invalid options")
	}
	for _, want := range []string{`"10.0.0.0/33"`, `"nope"`, "WithDomain", "cost -1 is negative", "WithObserver: nil Observer", "nil Option"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if _, err := New(WithUser(FromHeader("")), WithTenant(FromClaims(nil, "org"))); err == nil ||
		!strings.Contains(err.Error(), "WithUser: nil Extractor") || !strings.Contains(err.Error(), "WithTenant: nil Extractor") {
		t.Errorf("bad extractors: %v", err)
	}
}

// TestMisconfigurationPanicsAtConstruction: a shorthand with a bad option,
// or a nil stage, panics when it is built — never a 500 or INTERNAL at
// request time.
func TestMisconfigurationPanicsAtConstruction(t *testing.T) {
	t.Parallel()
	for name, build := range map[string]func(){
		"UnaryServer option":  func() { mustUnary(&stage{}, WithDomain(" ")) },
		"StreamServer option": func() { mustStream(&stage{}, WithHealthPaths("healthz")) },
		"HTTP option":         func() { mustHTTP(&stage{}, WithTrustedProxies("nope")) },
		"UnaryClient option":  func() { UnaryClient(WithMaxAttempts(0)) },
		"StreamClient option": func() { StreamClient(WithJitter(2)) },
		"nil stage":           func() { MustNew().UnaryServer(nil) },
		"nil HTTP stage":      func() { MustNew().HTTP(nil) },
		"MustNew":             func() { MustNew(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic at construction")
				}
			}()
			build()
		})
	}
}
