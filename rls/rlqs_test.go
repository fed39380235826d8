package rls_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

const quotaPolicy = `
rules:
  - {name: per-tenant, key: [tenant], rate: 100/1s, algorithm: token_bucket}
  - {name: per-route, key: [header:x-route], rate: 10/1s, algorithm: token_bucket}
rls:
  - domain: edge
    quota: true
    descriptors:
      - entries: [{key: tenant, as: tenant}]
        rule: per-tenant
      - entries: [{key: route, as: "header:x-route"}]
        rule: per-route
`

var (
	acme  = map[string]string{"tenant": "acme"}
	route = map[string]string{"route": "/a"}
)

// qenv is a QuotaServer on a real gRPC server on a loopback port, ticked
// by hand on fake time.
type qenv struct {
	clk     *clock.Fake
	limiter *tiers.Limiter
	store   quota.Store
	q       *rls.QuotaServer
	conn    *grpc.ClientConn
}

func newQEnv(t *testing.T, policy string, ledger quota.Reporter, clk *clock.Fake, opts ...rls.QuotaOption) *qenv {
	t.Helper()
	p, err := tiers.Load([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(ledger, p)
	if err != nil {
		t.Fatal(err)
	}
	q, err := rls.NewQuota(l, ledger, append([]rls.QuotaOption{rls.WithQuotaClock(clk), rls.WithQuotaLogger(quiet), rls.WithManualTicks()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	q.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		_ = q.Close(context.Background())
		g.Stop()
	})
	return &qenv{clk: clk, limiter: l, store: ledger, q: q, conn: conn}
}

func newMemQEnv(t *testing.T, policy string) *qenv {
	t.Helper()
	clk := clock.New(time.Time{})
	ms, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return newQEnv(t, policy, ms, clk)
}

// stream is a raw RLQS stream: the test says exactly what is reported.
type stream struct {
	st     rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel context.CancelFunc
	acts   chan *rlqsv3.RateLimitQuotaResponse_BucketAction
}

func (e *qenv) open(t *testing.T) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(e.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{st: st, cancel: cancel, acts: make(chan *rlqsv3.RateLimitQuotaResponse_BucketAction, 100)}
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				close(s.acts)
				return
			}
			for _, a := range r.GetBucketAction() {
				s.acts <- a
			}
		}
	}()
	return s
}

func use(id map[string]string, elapsed time.Duration, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: id},
		TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: allowed, NumRequestsDenied: denied}
}

func (s *stream) report(t *testing.T, usages ...*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	t.Helper()
	if err := s.st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: usages}); err != nil {
		t.Fatal(err)
	}
}

// next waits (up to 5 s of real time) for the stream's next action and
// describes it.
func (s *stream) next(t *testing.T) string {
	t.Helper()
	select {
	case a, ok := <-s.acts:
		if !ok {
			t.Fatal("stream ended")
		}
		return describe(a)
	case <-time.After(5 * time.Second):
		t.Fatalf("no action within 5 s (fake time %s)", "?")
	}
	return ""
}

// idle reports whether no action came within 250 ms (what a tick that
// changes nothing sends: a tick sends before it returns), or the action.
func (s *stream) idle() (string, bool) {
	select {
	case a := <-s.acts:
		return describe(a), false
	case <-time.After(250 * time.Millisecond):
		return "", true
	}
}

func describe(a *rlqsv3.RateLimitQuotaResponse_BucketAction) string {
	id := fmt.Sprint(a.GetBucketId().GetBucket())
	if a.GetAbandonAction() != nil {
		return id + " abandon"
	}
	qa := a.GetQuotaAssignmentAction()
	ttl := fmt.Sprintf(" ttl %ds", qa.GetAssignmentTimeToLive().GetSeconds())
	s := qa.GetRateLimitStrategy()
	if tb := s.GetTokenBucket(); tb != nil {
		return fmt.Sprintf("%s bucket %d/%ds max %d%s", id, tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().GetSeconds(), tb.GetMaxTokens(), ttl)
	}
	return id + " " + s.GetBlanketRule().String() + ttl
}

func expect(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// Each client is assigned its share of the rule's rate, following the
// number of clients and their reported demand, as a token bucket with a
// whole-second fill interval and a TTL a second past its next report; a
// share that grows waits for the others to shrink, so the assignments
// never sum above the rate.
func TestQuotaShareAssignment(t *testing.T) {
	e := newMemQEnv(t, quotaPolicy)
	a, b := e.open(t), e.open(t)
	a.report(t, use(acme, 0, 1, 0)) // Envoy's first report of a bucket: alone, count 1
	expect(t, a.next(t), "map[tenant:acme] bucket 100/1s max 25 ttl 7s")
	b.report(t, use(acme, 0, 1, 0))
	expect(t, b.next(t), "map[tenant:acme] DENY_ALL ttl 7s") // a holds all 100 until it shrinks

	e.clk.Advance(500 * time.Millisecond)
	e.q.Tick() // a shrinks to its fair half, then b grows into it
	expect(t, a.next(t), "map[tenant:acme] bucket 50/1s max 13 ttl 7s")
	expect(t, b.next(t), "map[tenant:acme] bucket 50/1s max 13 ttl 7s")

	// a offers 10/s, b 200/s: a is given what it asks (a tenth more), b
	// the rest; the TTL follows the cadence learnt from time_elapsed.
	e.clk.Advance(4500 * time.Millisecond)
	a.report(t, use(acme, 5*time.Second, 50, 0))
	expect(t, a.next(t), "map[tenant:acme] bucket 11/1s max 3 ttl 7s")
	b.report(t, use(acme, 5*time.Second, 250, 750))
	expect(t, b.next(t), "map[tenant:acme] bucket 89/1s max 23 ttl 7s")
	// A client reporting every 3 s: learnt over three reports (the longest
	// of the last three time_elapsed, as a bucket's first periodic report
	// covers only part of an interval).
	for _, want := range []string{"7s", "7s", "5s"} {
		e.clk.Advance(3 * time.Second)
		a.report(t, use(acme, 3*time.Second, 30, 0))
		expect(t, a.next(t), "map[tenant:acme] bucket 11/1s max 3 ttl "+want)
		b.report(t, use(acme, 3*time.Second, 150, 450))
		expect(t, b.next(t), "map[tenant:acme] bucket 89/1s max 23 ttl "+want)
	}

	// A third client waits for the others to shrink.
	c := e.open(t)
	c.report(t, use(acme, 0, 1, 0))
	expect(t, c.next(t), "map[tenant:acme] DENY_ALL ttl 7s")
}

// A share that is no whole number a second gets the whole-second fill
// interval that loses least of it: a third of 100/s is 100 per 3 s.
func TestQuotaThirds(t *testing.T) {
	e := newMemQEnv(t, quotaPolicy)
	ss := []*stream{e.open(t), e.open(t), e.open(t)}
	for _, s := range ss {
		s.report(t, use(acme, 0, 1, 0))
		s.next(t)
	}
	e.q.Tick()
	for _, s := range ss {
		expect(t, s.next(t), "map[tenant:acme] bucket 100/3s max 9 ttl 7s")
	}
}

// A bucket that absorbs nothing of what its clients reported (the
// services spend all of it) is exhausted: its clients get DENY_ALL within
// one reporting interval of the report, and their token bucket back once
// the bucket has absorbed the backlog.
func TestQuotaDenyAllWhenExhausted(t *testing.T) {
	e := newMemQEnv(t, quotaPolicy)
	s := e.open(t)
	s.report(t, use(route, 0, 1, 0))
	expect(t, s.next(t), "map[route:/a] bucket 10/1s max 3 ttl 7s")
	ctx := context.Background()
	drain := func() {
		req := &floodgate.Request{Headers: []floodgate.Header{{Name: "x-route", Value: "/a"}}}
		for range 100 {
			if d, _, _ := e.limiter.Admit(ctx, req); !d.Allowed {
				return
			}
		}
		t.Fatal("the bucket never ran out")
	}
	e.q.Tick() // charges the first request
	e.clk.Advance(5 * time.Second)
	drain()
	s.report(t, use(route, 5*time.Second, 50, 0))
	expect(t, s.next(t), "map[route:/a] bucket 10/1s max 3 ttl 7s")
	reported := e.clk.Now()
	for {
		e.clk.Advance(500 * time.Millisecond)
		drain()
		e.q.Tick()
		if got, none := s.idle(); !none {
			expect(t, got, "map[route:/a] DENY_ALL ttl 5s")
			break
		}
		if e.clk.Now().Sub(reported) >= 5*time.Second {
			t.Fatal("no DENY_ALL within one reporting interval (5 s) of the report")
		}
	}
	if waited := e.clk.Now().Sub(reported); waited > 3*time.Second {
		t.Errorf("DENY_ALL %s after the report; want within the exhaust span of 2 s and a tick", waited)
	}
	// The services stop: the bucket absorbs the backlog (50 units at 10/s)
	// and the client gets its bucket back.
	for range 20 {
		e.clk.Advance(500 * time.Millisecond)
		e.q.Tick()
		if got, none := s.idle(); !none {
			expect(t, got, "map[route:/a] bucket 10/1s max 3 ttl 1s")
			return
		}
	}
	t.Fatal("the bucket never recovered")
}

// A reload that removes a bucket's rule abandons it; a bucket whose rule
// stays is left alone.
func TestQuotaAbandonOnReload(t *testing.T) {
	e := newMemQEnv(t, quotaPolicy)
	s := e.open(t)
	s.report(t, use(acme, 0, 1, 0), use(route, 0, 1, 0))
	expect(t, s.next(t), "map[tenant:acme] bucket 100/1s max 25 ttl 7s")
	expect(t, s.next(t), "map[route:/a] bucket 10/1s max 3 ttl 7s")
	p, err := tiers.Load([]byte(`
rules:
  - {name: per-tenant, key: [tenant], rate: 100/1s, algorithm: token_bucket}
rls:
  - domain: edge
    quota: true
    descriptors:
      - entries: [{key: tenant, as: tenant}]
        rule: per-tenant
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.limiter.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Second)
	e.q.Tick()
	expect(t, s.next(t), "map[route:/a] abandon")
	if got, none := s.idle(); !none {
		t.Fatalf("after the abandon: %q; want nothing for the bucket that stays", got)
	}
	// The client starts the bucket afresh: not limited any more.
	s.report(t, use(route, 0, 1, 0))
	expect(t, s.next(t), "map[route:/a] ALLOW_ALL ttl 7s")
}

// A client killed (its stream lost) leaves the board at once: the others
// get its share at the next tick. What it holds is bounded by its own
// assignment until its TTL.
func TestQuotaKilledClient(t *testing.T) {
	e := newMemQEnv(t, quotaPolicy)
	a, b := e.open(t), e.open(t)
	a.report(t, use(acme, 0, 1, 0))
	a.next(t)
	b.report(t, use(acme, 0, 1, 0))
	b.next(t)
	e.q.Tick()
	expect(t, a.next(t), "map[tenant:acme] bucket 50/1s max 13 ttl 7s")
	expect(t, b.next(t), "map[tenant:acme] bucket 50/1s max 13 ttl 7s")
	b.cancel()
	for range 50 { // the server sees the stream end (real time)
		e.clk.Advance(100 * time.Millisecond)
		e.q.Tick()
		if got, none := a.idle(); !none {
			expect(t, got, "map[tenant:acme] bucket 100/1s max 25 ttl 7s")
			return
		}
	}
	t.Fatal("the survivor never got the killed client's share")
}

// lossy loses the reply of its first report call (applied, then an
// error) and, with failResolve, fails the first Resolve too.
type lossy struct {
	quota.Reporter
	lost, resolveFailed atomic.Bool
	failResolve         bool
	reports             atomic.Int64
}

func (l *lossy) Report(ctx context.Context, instance, seq uint64, bs []quota.Bucket, res []quota.ReportResult) error {
	l.reports.Add(1)
	err := l.Reporter.Report(ctx, instance, seq, bs, res)
	if err == nil && !l.lost.Swap(true) {
		return errors.New("reply lost")
	}
	return err
}

func (l *lossy) Resolve(ctx context.Context, instance, seq uint64, bs []quota.Bucket, res []quota.ReportResult) error {
	if l.failResolve && !l.resolveFailed.Swap(true) {
		return errors.New("redis down")
	}
	return l.Reporter.Resolve(ctx, instance, seq, bs, res)
}

// A report whose charge reached Redis but whose reply was lost is charged
// once: the server resolves the call (quota.Reporter) instead of charging
// again, at once or, when Redis does not answer, at the next tick.
func TestQuotaReportChargedOnce(t *testing.T) {
	for _, failResolve := range []bool{false, true} {
		t.Run(fmt.Sprintf("failResolve=%v", failResolve), func(t *testing.T) {
			srv := redistest.Start(t)
			clk := clock.New(time.Time{})
			l := &lossy{Reporter: redisStore(t, srv, clk), failResolve: failResolve}
			e := newQEnv(t, quotaPolicy, l, clk)
			s := e.open(t)
			s.report(t, use(acme, 0, 30, 0))
			s.next(t)
			e.q.Tick()
			e.q.Tick()
			e.q.Tick()
			qt, err := e.limiter.QuotaBuckets(nil, "edge", acme)
			if err != nil {
				t.Fatal(err)
			}
			res := make([]quota.Result, 1)
			qt.Buckets[0].Cost = 0 // read it
			if _, err := e.store.Take(context.Background(), qt.Buckets, res); err != nil {
				t.Fatal(err)
			}
			if res[0].Remaining != 70 {
				t.Fatalf("remaining %d after 30 reported; want 70: charged %d times", res[0].Remaining, (100-res[0].Remaining)/30)
			}
			if n := l.reports.Load(); n != 1 {
				t.Fatalf("%d report calls; want the one whose reply was lost, resolved", n)
			}
		})
	}
}

// Two servers sharing one Redis share a bucket's rate between their
// clients: the board in Redis grants each claim only what the others
// leave, atomically, so a client joining on one server waits for the
// other server's client to shrink.
func TestQuotaTwoServersShareOneRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	e1 := newQEnv(t, quotaPolicy, redisStore(t, srv, clk), clk, rls.WithQuotaRedis(srv.NewClient()))
	e2 := newQEnv(t, quotaPolicy, redisStore(t, srv, clk), clk, rls.WithQuotaRedis(srv.NewClient()))
	a, b := e1.open(t), e2.open(t)
	a.report(t, use(acme, 0, 1, 0))
	expect(t, a.next(t), "map[tenant:acme] bucket 100/1s max 25 ttl 7s")
	b.report(t, use(acme, 0, 1, 0))
	expect(t, b.next(t), "map[tenant:acme] DENY_ALL ttl 7s")
	e1.q.Tick() // reads b's claim: a shrinks
	expect(t, a.next(t), "map[tenant:acme] bucket 50/1s max 13 ttl 7s")
	e2.q.Tick() // b grows into the room
	expect(t, b.next(t), "map[tenant:acme] bucket 50/1s max 13 ttl 7s")
	// b's client is killed: its claim leaves the board, a grows back.
	b.cancel()
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		e1.q.Tick()
		if got, none := a.idle(); !none {
			expect(t, got, "map[tenant:acme] bucket 100/1s max 25 ttl 7s")
			return
		}
	}
	t.Fatal("a never got b's share back")
}

// The RLQS policy README.md shows loads, with a quota domain.
func TestReadmeQuotaPolicyLoads(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## Quota leases")
	if !ok {
		t.Fatal("README.md has no RLQS section")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	yaml, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("no YAML block in the RLQS section")
	}
	p, err := tiers.Load([]byte(yaml))
	if err != nil {
		t.Fatalf("README policy:\n%v", err)
	}
	if len(p.RLS) != 1 || !p.RLS[0].Quota {
		t.Fatalf("README policy has no quota domain: %+v", p.RLS)
	}
}

// A report the server cannot take ends the stream with INVALID_ARGUMENT,
// naming what is wrong.
func TestQuotaRefusesBadReports(t *testing.T) {
	e := newMemQEnv(t, quotaPolicy)
	for _, c := range []struct {
		msg  *rlqsv3.RateLimitQuotaUsageReports
		want string
	}{
		{&rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{use(acme, 0, 1, 0)}},
			"the first report names no domain"},
		{&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{use(nil, 0, 1, 0)}},
			"bucket_quota_usages[0].bucket_id is empty"},
		{&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{use(acme, -time.Second, 1, 0)}},
			"bucket_quota_usages[0].time_elapsed"},
	} {
		s := e.open(t)
		if err := s.st.Send(c.msg); err != nil {
			t.Fatal(err)
		}
		if _, ok := <-s.acts; ok {
			t.Fatalf("%v answered; want the stream ended", c.msg)
		}
		_, err := s.st.Recv()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want INVALID_ARGUMENT naming %q", c.msg, err, c.want)
		}
	}
}
