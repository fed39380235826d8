package rls

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
)

// QuotaServiceName is the full name of the gRPC service QuotaServer
// implements, as the health service reports it.
const QuotaServiceName = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

// DefaultQuotaTick is how often a QuotaServer charges its backlog to the
// buckets, reads the other servers' claims and pushes changed
// assignments, unless WithQuotaTick says otherwise.
const DefaultQuotaTick = 500 * time.Millisecond

// defaultCadence is the reporting interval assumed of a client until its
// reports' time_elapsed says otherwise: Envoy's filter reports every 5 s.
const defaultCadence = 5 * time.Second

// QuotaServer implements envoy.service.rate_limit_quota.v3's
// RateLimitQuotaService over a tiers.Limiter and the store its buckets
// live in; see the package documentation ("Quota leases: RLQS") for what
// it decides. It is safe for concurrent use. Close stops it.
type QuotaServer struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	limiter  *tiers.Limiter
	ledger   quota.Reporter
	board    quotaBoard
	clock    floodgate.Clock
	cfg      quotaConfig
	instance uint64 // names this server's report calls to the ledger
	seq      atomic.Uint64
	streamID atomic.Uint64

	mu      sync.Mutex
	buckets map[string]*qBucket // by ledger key
	streams map[*qStream]struct{}
	policy  *tiers.Policy // the policy the members were resolved under
	held    []heldCall    // report calls whose fate is not known yet

	tickMu  sync.Mutex
	ending  chan struct{} // closed: streams end
	endOnce sync.Once
	stop    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	lastLog atomic.Int64
}

// QuotaOption configures a QuotaServer.
type QuotaOption func(*quotaConfig)

type quotaConfig struct {
	clock  floodgate.Clock
	logger *slog.Logger
	tick   time.Duration
	manual bool // no background tick (tests tick by hand)
	redis  redis.UniversalClient
	errs   []error
}

// WithQuotaClock sets the clock assignments are timed by (default the
// system clock). It must not be nil.
func WithQuotaClock(c floodgate.Clock) QuotaOption {
	return func(q *quotaConfig) {
		if c == nil {
			q.errs = append(q.errs, errors.New("rls: WithQuotaClock: clock is nil"))
			return
		}
		q.clock = c
	}
}

// WithQuotaLogger sets where failed store calls and refused reports are
// logged (default slog.Default(); at most one line a second). It must not
// be nil.
func WithQuotaLogger(l *slog.Logger) QuotaOption {
	return func(q *quotaConfig) {
		if l == nil {
			q.errs = append(q.errs, errors.New("rls: WithQuotaLogger: logger is nil"))
			return
		}
		q.logger = l
	}
}

// WithQuotaTick sets how often the server charges reported usage to the
// buckets, reads the other servers' claims and pushes changed assignments
// (default DefaultQuotaTick; 10ms to 1m). A tick should be at most the
// time a bucket takes to fill (capacity / rate), or the refill the
// bucket cannot hold is lost to the fleet.
func WithQuotaTick(d time.Duration) QuotaOption {
	return func(q *quotaConfig) {
		if d < 10*time.Millisecond || d > time.Minute {
			q.errs = append(q.errs, fmt.Errorf("rls: WithQuotaTick: %s is not in [10ms, 1m]", d))
			return
		}
		q.tick = d
	}
}

// WithQuotaRedis keeps the claims of the clients (their demand and what
// they hold) in Redis, next to the buckets, so that several servers
// sharing the buckets share them fairly; by default they are kept in
// this process, which is right for one server only. It must not be nil.
func WithQuotaRedis(c redis.UniversalClient) QuotaOption {
	return func(q *quotaConfig) {
		if c == nil {
			q.errs = append(q.errs, errors.New("rls: WithQuotaRedis: client is nil"))
			return
		}
		q.redis = c
	}
}

// NewQuota returns a QuotaServer deciding with l's policy (its rls:
// domains with quota: true) and charging reported usage to ledger, the
// store l's buckets live in (a redisstore.Store, or the memstore.Store of
// one process). It starts the server's tick; Close stops it. Bad options
// are reported together.
func NewQuota(l *tiers.Limiter, ledger quota.Reporter, opts ...QuotaOption) (*QuotaServer, error) {
	c := quotaConfig{clock: floodgate.SystemClock(), logger: slog.Default(), tick: DefaultQuotaTick}
	if l == nil {
		c.errs = append(c.errs, errors.New("rls: NewQuota: limiter is nil"))
	}
	if ledger == nil {
		c.errs = append(c.errs, errors.New("rls: NewQuota: ledger is nil"))
	}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, errors.New("rls: nil QuotaOption"))
			continue
		}
		o(&c)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	q := &QuotaServer{limiter: l, ledger: ledger, clock: c.clock, cfg: c,
		instance: binary.LittleEndian.Uint64(b[:]) | 1,
		buckets:  map[string]*qBucket{}, streams: map[*qStream]struct{}{}, policy: l.Policy(),
		ending: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	q.board = newMemBoard(c.clock)
	if c.redis != nil {
		q.board = &redisBoard{client: c.redis}
	}
	if c.manual {
		close(q.done)
	} else {
		go q.loop()
	}
	return q, nil
}

// Register adds the rate limit quota service to g.
func (q *QuotaServer) Register(g grpc.ServiceRegistrar) {
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, q)
}

// Close ends the streams (their clients keep their assignments until
// their TTL, and reconnect) and stops the tick, after charging once more
// what was reported (within ctx). The server must not be used after
// Close.
func (q *QuotaServer) Close(ctx context.Context) error {
	if q.closed.Swap(true) {
		return nil
	}
	q.endStreams()
	close(q.stop)
	<-q.done
	q.tick(ctx)
	return nil
}

// loop ticks every cfg.tick, jittered by ±20% so that servers sharing a
// bucket do not charge it in lockstep.
func (q *QuotaServer) loop() {
	defer close(q.done)
	var j [8]byte
	for {
		_, _ = rand.Read(j[:])
		f := 0.8 + 0.4*float64(binary.LittleEndian.Uint64(j[:])>>11)/(1<<53)
		t := time.NewTimer(time.Duration(float64(q.cfg.tick) * f))
		select {
		case <-q.stop:
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(q.cfg.tick, time.Second))
		q.tick(ctx)
		cancel()
	}
}

// qStream is one client's stream.
type qStream struct {
	id      uint64
	srv     rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer
	sendMu  sync.Mutex
	domain  string
	members map[string]*qMember // by idKey
	reports uint64
}

func (s *qStream) send(actions []*rlqsv3.RateLimitQuotaResponse_BucketAction) error {
	if len(actions) == 0 {
		return nil
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.srv.Send(&rlqsv3.RateLimitQuotaResponse{BucketAction: actions})
}

// qMember is one bucket id of one stream.
type qMember struct {
	s       *qStream
	id      map[string]string
	idKey   string
	boardID string
	// b is the bucket the id is charged to; nil for an id answered with
	// a blanket rule (static) or not at all (assignNone).
	b          *qBucket
	static     assignKind
	demand     float64          // units per second offered; -1: unknown yet
	elapsed    [3]time.Duration // the last reports' time_elapsed (whole seconds)
	cadence    time.Duration    // the client's reporting interval: the longest of elapsed
	lastReport time.Time
	assigned   float64    // the rate it holds (units per second)
	sent       assignment // the last assignment sent
}

// idKey is a canonical string of a bucket id: its entries sorted by key.
func idKey(id map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(id)) {
		fmt.Fprintf(&b, "%d:%s=%d:%s;", len(k), k, len(id[k]), id[k])
	}
	return b.String()
}

// ttl is the TTL of an assignment sent at now: until a second after the
// client's next report is due, in whole seconds (Envoy reads durations
// in whole seconds), at least 1 s. The next report is due within
// cadence + 1 s of the last (time_elapsed is whole seconds, rounded
// down), so an assignment sent with a report lives cadence + 2 s: for
// Envoy's 5 s, 7 s.
func (m *qMember) ttl(now time.Time) time.Duration {
	due := m.lastReport.Add(m.cadence + time.Second).Sub(now)
	secs := max(0, math.Ceil(due.Seconds()))
	return time.Duration(secs+1) * time.Second
}

// StreamRateLimitQuotas implements RateLimitQuotaServiceServer: it takes
// the client's usage reports and answers each with the assignments of
// the buckets it names, and pushes changed assignments (and abandons)
// between reports.
func (q *QuotaServer) StreamRateLimitQuotas(srv rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	s := &qStream{id: q.streamID.Add(1), srv: srv, members: map[string]*qMember{}}
	q.mu.Lock()
	q.streams[s] = struct{}{}
	q.mu.Unlock()
	defer q.endStream(s)
	type recvd struct {
		msg *rlqsv3.RateLimitQuotaUsageReports
		err error
	}
	msgs := make(chan recvd, 1)
	gone := make(chan struct{})
	defer close(gone)
	go func() {
		for {
			msg, err := srv.Recv()
			select {
			case msgs <- recvd{msg, err}:
			case <-gone:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var r recvd
		select {
		case r = <-msgs:
		case <-q.ending:
			return status.Error(codes.Unavailable, "floodgate-rls: shutting down; reconnect")
		}
		if errors.Is(r.err, io.EOF) {
			return nil
		}
		if r.err != nil {
			return r.err
		}
		if err := q.report(srv.Context(), s, r.msg); err != nil {
			return err
		}
	}
}

// endStreams ends every stream (a server shutting down): the clients
// reconnect, to another server, and keep their assignments until their
// TTL meanwhile.
func (q *QuotaServer) endStreams() {
	q.endOnce.Do(func() { close(q.ending) })
}

// endStream forgets a stream's members: their claims leave the board (the
// usage they reported is still charged).
func (q *QuotaServer) endStream(s *qStream) {
	posts := map[string]boardBatch{}
	q.mu.Lock()
	delete(q.streams, s)
	for _, m := range s.members {
		if m.b != nil {
			removeClaim(posts, m)
		}
	}
	q.mu.Unlock()
	if len(posts) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := q.board.sync(ctx, posts, nil); err != nil {
			q.logf("floodgate-rls: RLQS: removing a closed stream's claims", err)
		}
	}
}

// report takes one usage report: each bucket's allowed requests join its
// backlog, its demand and cadence are learnt, and the client is sent the
// assignment of every bucket the report names.
func (q *QuotaServer) report(ctx context.Context, s *qStream, msg *rlqsv3.RateLimitQuotaUsageReports) error {
	if err := s.checkReport(msg); err != nil {
		q.logf("floodgate-rls: RLQS: report refused", err)
		return status.Error(codes.InvalidArgument, err.Error())
	}
	now := q.clock.Now()
	usages := msg.GetBucketQuotaUsages()
	touched := make([]*qMember, 0, len(usages))
	seen := make(map[*qMember]bool, len(usages))
	q.mu.Lock()
	s.reports++
	for _, u := range usages {
		m := q.member(s, u.GetBucketId().GetBucket())
		m.observe(now, u)
		if !seen[m] {
			seen[m] = true
			touched = append(touched, m)
		}
	}
	plans := make([]plan, len(touched))
	posts := map[string]boardBatch{}
	for i, m := range touched {
		plans[i] = q.plan(m, now, posts)
	}
	q.mu.Unlock()
	states, err := q.board.sync(ctx, posts, nil)
	if err != nil {
		q.logf("floodgate-rls: RLQS: board", err)
	}
	actions := make([]*rlqsv3.RateLimitQuotaResponse_BucketAction, 0, len(touched))
	q.mu.Lock()
	q.setBoards(states)
	for _, p := range plans {
		a := q.settle(p, states)
		if a.kind == assignNone {
			continue // no assignment: the client's no_assignment_behavior decides
		}
		p.m.sent = a
		actions = append(actions, a.action(p.m.id))
	}
	q.mu.Unlock()
	return s.send(actions)
}

// checkReport checks a report and takes its domain.
func (s *qStream) checkReport(msg *rlqsv3.RateLimitQuotaUsageReports) error {
	switch d := msg.GetDomain(); {
	case d != "" && s.domain == "":
		s.domain = d
	case d != "" && d != s.domain:
		return fmt.Errorf("domain %q after %q on one stream: open a stream for each domain", d, s.domain)
	case s.domain == "":
		return errors.New("the first report names no domain")
	}
	for i, u := range msg.GetBucketQuotaUsages() {
		if len(u.GetBucketId().GetBucket()) == 0 {
			return fmt.Errorf("bucket_quota_usages[%d].bucket_id is empty", i)
		}
		if el := u.GetTimeElapsed(); el != nil && (el.CheckValid() != nil || el.AsDuration() < 0) {
			return fmt.Errorf("bucket_quota_usages[%d].time_elapsed %v is not a duration >= 0", i, el)
		}
	}
	return nil
}

// member returns the stream's member for id, resolving a new one under
// the policy in force. q.mu is held.
func (q *QuotaServer) member(s *qStream, id map[string]string) *qMember {
	key := idKey(id)
	if m := s.members[key]; m != nil {
		return m
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	m := &qMember{s: s, id: maps.Clone(id), idKey: key, demand: -1, cadence: defaultCadence,
		elapsed: [3]time.Duration{defaultCadence, defaultCadence, defaultCadence},
		boardID: fmt.Sprintf("%x.%d.%x", q.instance, s.id, h.Sum64())}
	q.attach(m)
	s.members[key] = m
	return m
}

// attach resolves m's bucket id and joins it to its bucket. q.mu is held.
func (q *QuotaServer) attach(m *qMember) {
	kind, key, bs, err := q.resolve(m.s.domain, m.id)
	if err != nil {
		q.logf("floodgate-rls: RLQS: bucket id not resolved; no assignment", err)
	}
	m.static = kind
	if key == "" {
		return
	}
	b := q.buckets[key]
	if b == nil {
		b = newQBucket(key, bs, q.clock.Now())
		q.buckets[key] = b
	}
	b.members[m] = struct{}{}
	m.b = b
}

// resolve maps a bucket id to a blanket rule or to its buckets and their
// ledger key.
func (q *QuotaServer) resolve(domain string, id map[string]string) (assignKind, string, []quota.Bucket, error) {
	qt, err := q.limiter.QuotaBuckets(nil, domain, id)
	switch {
	case err != nil:
		return assignNone, "", nil, err
	case qt.Deny:
		return assignDeny, "", nil, nil
	case qt.Match != tiers.DescriptorLimited || len(qt.Buckets) == 0:
		return assignAllow, "", nil, nil // not limited, as ShouldRateLimit answers it
	}
	keys := make([]string, len(qt.Buckets))
	for i := range qt.Buckets {
		keys[i] = qt.Buckets[i].Key
		qt.Buckets[i].Cost = 0
	}
	return assignBucket, strings.Join(keys, "\x00"), qt.Buckets, nil
}

// observe learns from one usage report of m.
func (m *qMember) observe(now time.Time, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	allowed := min(u.GetNumRequestsAllowed(), math.MaxInt64/4)
	denied := min(u.GetNumRequestsDenied(), math.MaxInt64/4)
	if secs := u.GetTimeElapsed().GetSeconds(); secs >= 1 { // whole seconds, as Envoy counts
		el := time.Duration(min(secs, 3600)) * time.Second
		// The longest of the last three: a bucket's first periodic
		// report covers only part of an interval.
		m.elapsed = [3]time.Duration{m.elapsed[1], m.elapsed[2], el}
		m.cadence = max(m.elapsed[0], m.elapsed[1], m.elapsed[2])
		m.demand = float64(allowed+denied) / el.Seconds()
	}
	m.lastReport = now
	if m.b != nil {
		m.b.charge(int64(allowed))
	}
}

// plan is a member's assignment under way: the rate it wants, and where
// its post to the board sits (key, idx; key "" for none).
type plan struct {
	m    *qMember
	want float64
	ttl  time.Duration
	key  string
	idx  int
}

// plan computes what m wants at now and adds its post to posts. A
// member of an exhausted bucket wants 0 (DENY_ALL); any other its max-min
// fair share of the bucket's rate among the claims. q.mu is held.
func (q *QuotaServer) plan(m *qMember, now time.Time, posts map[string]boardBatch) plan {
	p := plan{m: m, ttl: m.ttl(now)}
	if m.b == nil {
		return p
	}
	b := m.b
	if !b.exhausted {
		claims, i := b.claims(m)
		p.want = fairShare(b.rate, claims, i)
	}
	batch := posts[b.key]
	batch.rate = b.rate
	p.key, p.idx = b.key, len(batch.posts)
	batch.posts = append(batch.posts, boardPost{member: m.boardID, demand: m.demand, want: p.want, ttl: p.ttl})
	posts[b.key] = batch
	return p
}

// settle turns p into m's assignment: a blanket rule for an id with no
// bucket, else a token bucket of what the board granted (when the board
// did not answer, what the claims last read leave), DENY_ALL for nothing.
// A grant at most 2% above the rate m holds keeps its configuration (a
// new token bucket starts full). q.mu is held.
func (q *QuotaServer) settle(p plan, states map[string]boardState) assignment {
	m := p.m
	if p.key == "" {
		return assignment{kind: m.static, ttl: p.ttl}
	}
	var g float64
	if st, ok := states[p.key]; ok && p.idx < len(st.granted) {
		g = st.granted[p.idx]
	} else {
		claims, i := m.b.claims(m)
		others := 0.0
		for k, c := range claims {
			if k != i {
				others += c.assigned
			}
		}
		g = grant(m.b.rate, p.want, others)
	}
	a := tokenBucket(g, p.ttl)
	if h := m.sent; h.kind == assignBucket && a.kind == assignBucket && h.rate() <= g+1e-9 && h.rate() >= 0.98*g {
		a = h
		a.ttl = p.ttl
	}
	m.assigned = a.rate()
	return a
}

// setBoards takes the claims a board sync returned. q.mu is held.
func (q *QuotaServer) setBoards(states map[string]boardState) {
	for key, st := range states {
		if b := q.buckets[key]; b != nil {
			b.board = st.entries
		}
	}
}

// logf logs err at most once a second.
func (q *QuotaServer) logf(msg string, err error) {
	now := time.Now().UnixNano()
	last := q.lastLog.Load()
	if now-last < int64(time.Second) || !q.lastLog.CompareAndSwap(last, now) {
		return
	}
	q.cfg.logger.Warn(msg, "error", err)
}
