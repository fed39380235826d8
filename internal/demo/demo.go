package demo

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/internal/shoppb"
)

// Policy is the demo's rate-limit policy (policy.yaml).
//
//go:embed policy.yaml
var Policy []byte

// Config tunes a demo run.
type Config struct {
	// Duration is how long traffic runs; 0 means 20 s.
	Duration time.Duration
	// RedisURL, when set, keeps rate-limit state in that Redis (through the
	// fallback store) instead of in process.
	RedisURL string
	// Progress receives one line per second while traffic runs; nil: none.
	Progress io.Writer
	// Logger receives the library's logs (breaker changes, fallback);
	// nil: discarded.
	Logger *slog.Logger
	// Fault, when set, makes the run start its own redis-server on a free
	// loopback port (through testing/redistest; redis-server must be
	// installed), keep rate-limit state there, and kill or pause it as
	// the Fault says. RedisURL must then be empty.
	Fault *Fault
	// Compare is the length of each of the three runs of the overload
	// comparison that follows the main run (a fixed shedder
	// capacity, an adaptive one, an adaptive concurrency limit); 0 means
	// a fifth of Duration, at least 2s. It must be 0 or at least 1s.
	Compare time.Duration
	// SkipCompare leaves the overload comparison out.
	SkipCompare bool
}

// compareDuration is the length of each comparison run.
func (c Config) compareDuration() time.Duration {
	if c.Compare > 0 {
		return c.Compare
	}
	return max(2*time.Second, c.Duration/5)
}

// prepare validates c and returns it with its defaults filled in
// (Duration), and the logger to use (Logger, or one that discards).
func (c Config) prepare() (Config, *slog.Logger, error) {
	if err := c.Validate(); err != nil {
		return c, nil, err
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	logger := c.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return c, logger, nil
}

// Validate reports what is wrong with c, before anything starts.
func (c Config) Validate() error {
	d := c.Duration
	if d == 0 {
		d = DefaultDuration
	}
	if d < time.Second {
		return fmt.Errorf("demo: duration %s is shorter than 1s", d)
	}
	if c.Compare < 0 || (c.Compare > 0 && c.Compare < time.Second) {
		return fmt.Errorf("demo: comparison run length %s must be 0 (the default) or at least 1s; SkipCompare leaves the comparison out", c.Compare)
	}
	if c.Fault != nil {
		if c.RedisURL != "" {
			return fmt.Errorf("demo: a redis fault (%s) breaks a redis-server the demo starts itself, not the Redis at %s: unset REDIS_URL (or -redis) or drop the fault", c.Fault, redisHost(c.RedisURL))
		}
		if err := c.Fault.check(d); err != nil {
			return err
		}
	}
	return nil
}

// DefaultDuration is the length of a run whose Config.Duration is 0.
const DefaultDuration = 20 * time.Second

// Headers the demo's edge proxy (the load generator) sets and the services
// trust. A real deployment would strip them from client requests at its
// edge. policy.yaml's identity: section names the first three.
const (
	headerTenant   = "X-Tenant"
	headerUser     = "X-User"
	headerTier     = "X-Tier"
	headerPriority = "X-Priority"
)

// Shedder capacity (policy.yaml's shedder: section says it; Run checks
// they agree) and the handlers' simulated work: at capacity the service
// is saturated, and the shedder starts with test traffic at 70%.
const (
	shedCapacity = 40
	workTime     = 20 * time.Millisecond
)

// Run starts the demo services on loopback, drives the scenario at them for
// cfg.Duration, and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, logger, err := cfg.prepare()
	if err != nil {
		return nil, err
	}
	progress := &syncWriter{w: cfg.Progress}
	var faultSrv *faultServer
	if cfg.Fault != nil {
		srv, err := startFaultServer()
		if err != nil {
			return nil, err
		}
		defer srv.stop()
		faultSrv = srv
		cfg.RedisURL = "redis://" + srv.addr()
	}
	axis := axisFor(cfg.Duration)
	tl := newTimeline(axis)

	svc, err := startService(ctx, cfg, logger, tl, faultSrv != nil)
	if err != nil {
		return nil, err
	}
	defer svc.Close()
	g, storeName := svc.Guard, svc.store
	shed := g.Shedder()
	fmt.Fprintf(progress, "who is denied, live: floodgate top -url %s -watch 2s\n\n", svc.TopURL)

	start := time.Now()
	stats := NewStats(start, axis)
	tl.begin(start)
	d := &driver{
		base:   svc.URL,
		http:   svc.client,
		shop:   shoppb.NewShopClient(svc.conn),
		stats:  stats,
		start:  start,
		window: cfg.Duration,
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if cfg.Progress != nil {
			d.progress(runCtx, progress, shed)
		}
	}()
	var (
		faultEvent *Event
		faultNotes []string
	)
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		if faultSrv != nil {
			faultEvent, faultNotes = injectFault(runCtx, faultSrv, *cfg.Fault, start, cfg.Duration, progress)
		}
	}()
	gens := Scenario(cfg.Duration)
	d.run(runCtx, gens)
	<-progressDone
	<-faultDone
	if faultSrv != nil && cfg.Fault.Kind == FaultPause {
		_ = faultSrv.p.Resume() // nothing waits on a stopped server while the run shuts down
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	var comparison *Comparison
	if !cfg.SkipCompare {
		cd := cfg.compareDuration()
		fmt.Fprintf(progress, "\noverload comparison: 3 runs of %s, one service behind a fixed shedder, an adaptive shedder, an adaptive concurrency limit\n", cd)
		c, err := compare(ctx, cd, progress)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("demo: overload comparison: %w", err)
		}
		comparison = c
	}

	rep := &Report{
		Store:    storeName,
		Duration: cfg.Duration,
		Axis:     axis,
		Rows: stats.Rows([]string{
			"all", "tier=free", "tier=pro", "tier=enterprise",
			"priority=critical", "priority=write", "priority=read", "priority=test",
			"scenario=attack", "scenario=brute-force",
		}),
		Series:  map[string][]Point{"all": stats.Series("all")},
		Events:  Events(gens),
		Fault:   cfg.Fault,
		Compare: comparison,
	}
	for _, tier := range []string{"free", "pro", "enterprise"} {
		for _, p := range []string{"critical", "write", "read", "test"} {
			rep.Cross = append(rep.Cross, stats.Rows([]string{"tier=" + tier + ",priority=" + p})...)
		}
	}
	for _, n := range []string{"tier=free", "tier=pro", "tier=enterprise", "priority=critical", "priority=write", "priority=read", "priority=test"} {
		rep.Series[n] = stats.Series(n)
		rep.SeriesOrder = append(rep.SeriesOrder, n)
	}
	rep.Sources, rep.Denials = tl.snapshot()
	rep.Latency, rep.Admitted = stats.Latency()
	if faultEvent != nil {
		rep.Events = append(rep.Events, *faultEvent)
	}
	rep.Notes = append(tl.notes(), faultNotes...)
	if fb := g.Fallback(); fb != nil {
		rep.Breaker = tl.breakerSpans(cfg.Duration)
		st := fb.Stats()
		rep.Fallback = &st
		rep.Notes = append(rep.Notes, fmt.Sprintf(
			"Redis fallback: breaker %s; %d store calls, %d failed (%d timed out); %d takes decided without Redis (%d allowed, %d denied); breaker opened %d times",
			st.State, st.Calls, st.Failures, st.Timeouts, st.FallbackTakesAllowed+st.FallbackTakesDenied,
			st.FallbackTakesAllowed, st.FallbackTakesDenied, st.Opened))
	}
	return rep, nil
}

// injectFault breaks srv at f.At after start and, when f.For is set,
// repairs it f.For later; it returns the fault's event (nil when the run
// ended first) and notes on anything that went wrong.
func injectFault(ctx context.Context, srv *faultServer, f Fault, start time.Time, d time.Duration, progress io.Writer) (*Event, []string) {
	wait := func(off time.Duration) bool {
		t := time.NewTimer(time.Until(start.Add(off)))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	if !wait(f.At) {
		return nil, nil
	}
	down, up := f.verb()
	at := time.Since(start)
	if err := srv.inject(f); err != nil {
		return nil, []string{fmt.Sprintf("redis fault %s: could not break redis-server: %v", f, err)}
	}
	fmt.Fprintf(progress, "%5s  %s (%s)\n", fmtSec(at), down, f)
	ev := &Event{Name: down, Kind: "fault", From: at, To: d}
	if f.For == 0 || !wait(f.At+f.For) {
		return ev, nil
	}
	err := srv.recover(f)
	ev.To = min(time.Since(start), d) // a slow restart may end after the traffic
	if err != nil {
		return ev, []string{fmt.Sprintf("redis fault %s: redis-server could not be %s: %v", f, up, err)}
	}
	fmt.Fprintf(progress, "%5s  Redis %s\n", fmtSec(ev.To), up)
	return ev, nil
}

// syncWriter serialises the progress lines of the load driver and the
// fault injector; a nil w discards them.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	if s.w == nil {
		return len(p), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// redisHost is the host part of a Redis URL, without credentials, for
// messages.
func redisHost(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return "(URL)"
}

type shopServer struct {
	shoppb.UnimplementedShopServer
}

func (shopServer) Login(ctx context.Context, req *shoppb.LoginRequest) (*shoppb.LoginReply, error) {
	return reply(ctx, &shoppb.LoginReply{Token: "session-" + req.GetUser()})
}

func (shopServer) Search(ctx context.Context, _ *shoppb.SearchRequest) (*shoppb.SearchReply, error) {
	return reply(ctx, &shoppb.SearchReply{Items: []string{"lamp", "desk", "chair"}})
}

func (shopServer) Pay(ctx context.Context, _ *shoppb.PayRequest) (*shoppb.PayReply, error) {
	return reply(ctx, &shoppb.PayReply{PaymentId: "paid"})
}

// reply answers with msg after the simulated work, or gives up when the
// call ends.
func reply[T any](ctx context.Context, msg *T) (*T, error) {
	select {
	case <-time.After(workTime):
		return msg, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
