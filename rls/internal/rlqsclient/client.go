// Package rlqsclient is a client of Envoy's rate limit quota service
// (RLQS) that behaves as Envoy's rate_limit_quota HTTP filter does (its
// source, 2026), not only as the proto's comments say, so that tests and
// the benchmark hold a server to what a fleet of today's Envoys does:
//
//   - The first request of a new bucket is decided by
//     no_assignment_behavior and sends, at once, a report of that bucket
//     alone with a count of 1 and no time elapsed.
//   - Every later report carries every cached bucket, idle ones too, and
//     is sent every 5 s whatever reporting_interval says (envoy issue
//     46033): Config.ReportInterval, 5 s by default.
//   - Durations are whole seconds: time_elapsed is sent, and TTLs and
//     fill intervals are read, in whole seconds; an unset TTL expires at
//     once.
//   - Until a bucket's first assignment its requests are decided by
//     no_assignment_behavior; after its assignment's TTL, by
//     expired_assignment_behavior's fallback_rate_limit (the one it
//     honours; reuse_last_assignment is not implemented), else
//     no_assignment_behavior again.
//   - A token bucket assignment is a bucket that starts full (max_tokens)
//     and refills tokens_per_fill every fill_interval, continuously; an
//     assignment whose configuration equals the bucket's keeps its state.
//   - An abandon action drops the bucket: its next request is a new
//     bucket's first.
//   - A stream that fails is opened again at the next report; what the
//     failed report carried is lost, as Envoy loses it.
//
// It is internal: used by the tests and the benchmark (cmd/rlqs-bench).
package rlqsclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
)

// DefaultReportInterval is how often Envoy's filter reports.
const DefaultReportInterval = 5 * time.Second

// Config is the filter's configuration.
type Config struct {
	// Domain is the filter's domain, sent in each stream's first report.
	Domain string
	// ReportInterval is how often every cached bucket is reported
	// (default DefaultReportInterval). Manual sends no periodic report:
	// the caller calls Report.
	ReportInterval time.Duration
	Manual         bool
	// NoAssignmentDeny: no_assignment_behavior is DENY_ALL (default
	// ALLOW_ALL).
	NoAssignmentDeny bool
	// ExpiredFallback is expired_assignment_behavior's
	// fallback_rate_limit; nil: none.
	ExpiredFallback *typev3.RateLimitStrategy
	// Clock times the decisions and reports (default the system clock).
	Clock floodgate.Clock
}

// Stats counts what the client did.
type Stats struct {
	Reports, Actions, Abandons, StreamErrors uint64
	// Fresh is the sum of max_tokens of the token buckets assigned that
	// started full (a configuration the bucket did not have): what the
	// client may admit at once beyond the assigned rates.
	Fresh uint64
	// Unassigned and Expired count the requests allowed by
	// no_assignment_behavior and by the expired fallback.
	Unassigned, Expired uint64
}

// Client is one Envoy's filter: its buckets and its stream.
type Client struct {
	cfg    Config
	rq     rlqsv3.RateLimitQuotaServiceClient
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	buckets map[string]*bucket
	stream  rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	fresh   bool // no report sent on stream yet
	stats   Stats
	sendMu  sync.Mutex
}

type kind uint8

const (
	kindAllow kind = iota
	kindDeny
	kindBucket
)

// strategy is an assignment's (or the fallback's) rate limit strategy,
// with its token bucket's state.
type strategy struct {
	kind         kind
	max, perFill float64
	fill         time.Duration
	tokens       float64
	last         time.Time
}

type bucket struct {
	id              map[string]string
	allowed, denied uint64
	lastReport      time.Time
	assigned        bool
	a               strategy
	expires         time.Time
	fallback        *strategy // the fallback's state, once expired
}

// New opens the client's stream on conn; it ends with ctx or Close.
func New(ctx context.Context, conn grpc.ClientConnInterface, cfg Config) (*Client, error) {
	if cfg.Domain == "" {
		return nil, errors.New("rlqsclient: Domain is empty")
	}
	if cfg.ReportInterval == 0 {
		cfg.ReportInterval = DefaultReportInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = floodgate.SystemClock()
	}
	cctx, cancel := context.WithCancel(ctx)
	c := &Client{cfg: cfg, rq: rlqsv3.NewRateLimitQuotaServiceClient(conn), ctx: cctx, cancel: cancel,
		done: make(chan struct{}), buckets: map[string]*bucket{}}
	if _, err := c.open(); err != nil {
		cancel()
		return nil, err
	}
	go c.loop()
	return c, nil
}

// Close ends the stream and the reports.
func (c *Client) Close() {
	c.cancel()
	<-c.done
}

// Stats returns the counts so far.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *Client) loop() {
	defer close(c.done)
	if c.cfg.Manual {
		<-c.ctx.Done()
		return
	}
	t := time.NewTicker(c.cfg.ReportInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			_ = c.Report()
		}
	}
}

// open returns the stream, opening one (and its receiver) if there is
// none.
func (c *Client) open() (rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stream != nil {
		return c.stream, nil
	}
	st, err := c.rq.StreamRateLimitQuotas(c.ctx)
	if err != nil {
		c.stats.StreamErrors++
		return nil, err
	}
	c.stream, c.fresh = st, true
	go c.receive(st)
	return st, nil
}

// broken forgets st after it failed.
func (c *Client) broken(st rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stream == st {
		c.stream = nil
		c.stats.StreamErrors++
	}
}

// send sends a report on the stream (the domain in a new stream's first).
func (c *Client) send(usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) error {
	st, err := c.open()
	if err != nil {
		return err
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	msg := &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: usages}
	c.mu.Lock()
	if c.fresh && c.stream == st { // the domain in a stream's first report only
		msg.Domain, c.fresh = c.cfg.Domain, false
	}
	c.mu.Unlock()
	err = st.Send(msg)
	if err != nil {
		c.broken(st)
		return err
	}
	c.mu.Lock()
	c.stats.Reports++
	c.mu.Unlock()
	return nil
}

func (c *Client) receive(st rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	for {
		resp, err := st.Recv()
		if err != nil {
			c.broken(st)
			return
		}
		now := c.cfg.Clock.Now()
		c.mu.Lock()
		for _, a := range resp.GetBucketAction() {
			c.stats.Actions++
			c.act(now, a)
		}
		c.mu.Unlock()
	}
}

// act applies one bucket action. c.mu is held.
func (c *Client) act(now time.Time, a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
	key := IDKey(a.GetBucketId().GetBucket())
	b := c.buckets[key]
	if b == nil {
		return
	}
	if a.GetAbandonAction() != nil {
		c.stats.Abandons++
		delete(c.buckets, key)
		return
	}
	qa := a.GetQuotaAssignmentAction()
	if qa == nil {
		return
	}
	next := parse(qa.GetRateLimitStrategy(), now)
	if !b.assigned || !b.a.sameConfig(next) {
		b.a = next // a new token bucket starts full
		if next.kind == kindBucket {
			c.stats.Fresh += uint64(next.max)
		}
	}
	b.assigned = true
	b.expires = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
	b.fallback = nil
}

// parse reads a strategy the way Envoy does: whole-second fill
// intervals; nil allows all.
func parse(s *typev3.RateLimitStrategy, now time.Time) strategy {
	switch {
	case s == nil:
		return strategy{kind: kindAllow}
	case s.GetTokenBucket() != nil:
		tb := s.GetTokenBucket()
		per := uint32(1)
		if tb.GetTokensPerFill() != nil {
			per = tb.GetTokensPerFill().GetValue()
		}
		fill := time.Duration(tb.GetFillInterval().GetSeconds()) * time.Second
		if fill <= 0 || tb.GetMaxTokens() == 0 {
			return strategy{kind: kindDeny}
		}
		return strategy{kind: kindBucket, max: float64(tb.GetMaxTokens()), perFill: float64(per), fill: fill,
			tokens: float64(tb.GetMaxTokens()), last: now}
	case s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL:
		return strategy{kind: kindDeny}
	case s.GetRequestsPerTimeUnit() != nil:
		r := s.GetRequestsPerTimeUnit()
		return strategy{kind: kindBucket, max: float64(r.GetRequestsPerTimeUnit()), perFill: float64(r.GetRequestsPerTimeUnit()),
			fill: unitOf(r.GetTimeUnit()), tokens: float64(r.GetRequestsPerTimeUnit()), last: now}
	}
	return strategy{kind: kindAllow}
}

func unitOf(u typev3.RateLimitUnit) time.Duration {
	switch u {
	case typev3.RateLimitUnit_MINUTE:
		return time.Minute
	case typev3.RateLimitUnit_HOUR:
		return time.Hour
	case typev3.RateLimitUnit_DAY:
		return 24 * time.Hour
	}
	return time.Second
}

func (s strategy) sameConfig(o strategy) bool {
	return s.kind == o.kind && s.max == o.max && s.perFill == o.perFill && s.fill == o.fill
}

// take decides one request under s.
func (s *strategy) take(now time.Time) bool {
	switch s.kind {
	case kindAllow:
		return true
	case kindDeny:
		return false
	}
	if el := now.Sub(s.last); el > 0 {
		s.tokens = min(s.max, s.tokens+el.Seconds()*s.perFill/s.fill.Seconds())
		s.last = now
	}
	if s.tokens >= 1 {
		s.tokens--
		return true
	}
	return false
}

// Allow decides one request of the bucket id, as the filter does.
func (c *Client) Allow(id map[string]string) bool {
	now := c.cfg.Clock.Now()
	key := IDKey(id)
	c.mu.Lock()
	b := c.buckets[key]
	if b == nil {
		b = &bucket{id: maps.Clone(id), lastReport: now}
		c.buckets[key] = b
		ok := c.decide(b, now)
		c.mu.Unlock()
		u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: b.id}, TimeElapsed: &durationpb.Duration{}}
		if ok {
			u.NumRequestsAllowed = 1
		} else {
			u.NumRequestsDenied = 1
		}
		_ = c.send([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{u})
		return ok
	}
	ok := c.decide(b, now)
	if ok {
		b.allowed++
	} else {
		b.denied++
	}
	c.mu.Unlock()
	return ok
}

// decide applies the bucket's assignment, its expiry behaviour or the
// no-assignment behaviour. c.mu is held.
func (c *Client) decide(b *bucket, now time.Time) bool {
	switch {
	case b.assigned && now.Before(b.expires):
		return b.a.take(now)
	case b.assigned && c.cfg.ExpiredFallback != nil:
		if b.fallback == nil {
			f := parse(c.cfg.ExpiredFallback, now)
			b.fallback = &f
		}
		ok := b.fallback.take(now)
		if ok {
			c.stats.Expired++
		}
		return ok
	}
	if !c.cfg.NoAssignmentDeny {
		c.stats.Unassigned++
		return true
	}
	return false
}

// Report sends the periodic report: every cached bucket, with what it
// allowed and denied since its last report and the time elapsed, in
// whole seconds.
func (c *Client) Report() error {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	usages := make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, 0, len(c.buckets))
	for _, key := range slices.Sorted(maps.Keys(c.buckets)) {
		b := c.buckets[key]
		usages = append(usages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: b.id},
			TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.lastReport) / time.Second)},
			NumRequestsAllowed: b.allowed,
			NumRequestsDenied:  b.denied,
		})
		b.allowed, b.denied, b.lastReport = 0, 0, now
	}
	c.mu.Unlock()
	if len(usages) == 0 {
		return nil
	}
	return c.send(usages)
}

// Assignment describes the bucket id's assignment at now, for tests:
// "none", "expired", "allow", "deny" or "bucket <per>/<fill> max <max>";
// "" for a bucket the client does not have.
func (c *Client) Assignment(id map[string]string) string {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buckets[IDKey(id)]
	switch {
	case b == nil:
		return ""
	case !b.assigned:
		return "none"
	case !now.Before(b.expires):
		return "expired"
	}
	switch b.a.kind {
	case kindAllow:
		return "allow"
	case kindDeny:
		return "deny"
	}
	return fmt.Sprintf("bucket %g/%s max %g", b.a.perFill, b.a.fill, b.a.max)
}

// IDKey is a canonical string of a bucket id.
func IDKey(id map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(id)) {
		fmt.Fprintf(&b, "%d:%s=%d:%s;", len(k), k, len(id[k]), id[k])
	}
	return b.String()
}
