package rls

import (
	"context"
	"math"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/floodgate-go/floodgate/quota"
)

// qBucket is the ledger of one bucket (a rule's buckets for one
// identity): what its clients reported and this server has not charged
// yet, and whether the bucket is exhausted.
type qBucket struct {
	key      string
	subs     []quota.Bucket // the rule's buckets (several for several windows), Cost 0
	backlog  []int64        // per sub: units reported, not charged yet
	rate     float64        // units per second, the tightest window's
	capacity int64          // the smallest capacity
	members  map[*qMember]struct{}
	board    []boardEntry // every server's claims, as last read
	inflight int          // report calls under way
	// exhausted: the bucket has absorbed nothing of the backlog since
	// stuckSince for the exhaust span: its clients are assigned
	// DENY_ALL until the backlog is down to the capacity.
	exhausted  bool
	stuckSince time.Time
}

func newQBucket(key string, bs []quota.Bucket, _ time.Time) *qBucket {
	b := &qBucket{key: key, members: map[*qMember]struct{}{}, backlog: make([]int64, len(bs))}
	b.setLimits(bs)
	return b
}

// setLimits sets the buckets' limits (a reload may change a rule's rate).
func (b *qBucket) setLimits(bs []quota.Bucket) {
	b.subs = bs
	b.rate, b.capacity = math.Inf(1), math.MaxInt64
	for _, s := range bs {
		b.rate = min(b.rate, float64(s.Limit.Rate)/s.Limit.Period.Seconds())
		b.capacity = min(b.capacity, s.Limit.Capacity())
	}
}

func (b *qBucket) charge(n int64) {
	for i := range b.backlog {
		b.backlog[i] += n
	}
}

func (b *qBucket) owing() bool {
	for _, n := range b.backlog {
		if n > 0 {
			return true
		}
	}
	return false
}

func (b *qBucket) remove(m *qMember) {
	delete(b.members, m)
}

// claims returns the claims on b, every server's (as last read from the
// board) with this server's own members' current ones, and the index of
// m's.
func (b *qBucket) claims(m *qMember) ([]claim, int) {
	local := make(map[string]bool, len(b.members))
	for mm := range b.members {
		local[mm.boardID] = true
	}
	claims := make([]claim, 0, len(b.board)+len(b.members))
	for _, e := range b.board {
		if !local[e.member] {
			claims = append(claims, e.claim)
		}
	}
	i := -1
	for mm := range b.members {
		if mm == m {
			i = len(claims)
		}
		claims = append(claims, claim{demand: mm.demand, assigned: mm.assigned})
	}
	return claims, i
}

// judge updates whether b is exhausted after a charge that absorbed
// something of its backlog (absorbed) or nothing.
func (b *qBucket) judge(now time.Time, absorbed bool, span time.Duration) {
	switch {
	case !b.owing():
		b.stuckSince, b.exhausted = time.Time{}, false
		return
	case absorbed:
		b.stuckSince = time.Time{}
	case b.stuckSince.IsZero():
		b.stuckSince = now
	}
	if !b.exhausted && !b.stuckSince.IsZero() && now.Sub(b.stuckSince) >= span {
		b.exhausted = true
	}
	if b.exhausted && b.stuckSince.IsZero() && slicesMax(b.backlog) <= b.capacity {
		b.exhausted = false
	}
}

func slicesMax(s []int64) int64 {
	m := int64(0)
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// exhaustSpan is how long a bucket that owes units absorbs nothing before
// it is exhausted: two ticks, at least 2 s and the time two units take to
// refill, so a bucket another server drains first for a tick is not.
func (q *QuotaServer) exhaustSpan(b *qBucket) time.Duration {
	return max(2*q.cfg.tick, 2*time.Second, time.Duration(2/b.rate*float64(time.Second)))
}

// feedItem is one bucket of a report call: sub i of b, charged cost.
type feedItem struct {
	b    *qBucket
	i    int
	cost int64
}

// heldCall is a report call that failed and could not be resolved yet.
type heldCall struct {
	seq   uint64
	bs    []quota.Bucket
	items []feedItem
	at    time.Time
}

// feedCall moves what each bucket owes, up to its cap for this tick,
// into one report call. q.mu is held.
func (q *QuotaServer) feedCall() ([]quota.Bucket, []feedItem) {
	var bs []quota.Bucket
	var items []feedItem
	seen := map[string]bool{}
	for _, b := range q.buckets {
		capTick := q.feedCap(b)
		for i, n := range b.backlog {
			if n <= 0 || seen[b.subs[i].Key] {
				continue
			}
			seen[b.subs[i].Key] = true
			c := min(n, capTick)
			sb := b.subs[i]
			sb.Cost = c
			bs = append(bs, sb)
			items = append(items, feedItem{b: b, i: i, cost: c})
			b.backlog[i] -= c
		}
		if len(items) > 0 && items[len(items)-1].b == b {
			b.inflight++
		}
	}
	return bs, items
}

// feedCap is the most a tick charges of b: a quarter more than this
// server's part of a tick's refill (its members' share of the claims on
// the board), so that servers sharing a bucket each get their part of
// the refill, and each drains its backlog faster than it grows.
func (q *QuotaServer) feedCap(b *qBucket) int64 {
	f := 1.0
	if n := len(b.board); n > 0 && len(b.members) > 0 {
		f = min(1, float64(len(b.members))/float64(n))
	}
	return max(1, int64(math.Ceil(1.25*b.rate*q.cfg.tick.Seconds()*f)))
}

// charge runs a report call; a call whose reply is lost is resolved
// (quota.Reporter), so its units are charged once: applied, or returned
// to the backlog. It returns whether the results are known.
func (q *QuotaServer) charge(ctx context.Context, seq uint64, bs []quota.Bucket, res []quota.ReportResult) bool {
	err := q.ledger.Report(ctx, q.instance, seq, bs, res)
	if err == nil {
		return true
	}
	if rerr := q.ledger.Resolve(ctx, q.instance, seq, bs, res); rerr != nil {
		q.logf("floodgate-rls: RLQS: charging the buckets failed and could not be resolved; resolving at the next tick", rerr)
		return false
	}
	return true
}

// apply returns to the backlogs what a call did not charge, and judges
// the buckets it charged. q.mu is held.
func (q *QuotaServer) apply(now time.Time, items []feedItem, res []quota.ReportResult) {
	absorbed := map[*qBucket]bool{}
	for k, it := range items {
		charged := int64(0)
		if res[k].Applied {
			charged = max(0, min(res[k].Charged, it.cost))
		}
		it.b.backlog[it.i] += it.cost - charged
		absorbed[it.b] = absorbed[it.b] || charged > 0
	}
	for b, a := range absorbed {
		b.inflight--
		b.judge(now, a, q.exhaustSpan(b))
	}
}

// tick charges the backlogs, reads the board, drops silent members,
// abandons the buckets a reload unmapped and pushes the assignments that
// changed.
func (q *QuotaServer) tick(ctx context.Context) {
	q.tickMu.Lock()
	defer q.tickMu.Unlock()
	now := q.clock.Now()
	out := map[*qStream][]*rlqsv3.RateLimitQuotaResponse_BucketAction{}
	removals := map[string]boardBatch{}
	q.mu.Lock()
	q.abandonUnmapped(out, removals)
	q.dropSilent(now, removals)
	bs, items := q.feedCall()
	held := q.held
	q.held = nil
	reads := make([]string, 0, len(q.buckets))
	for key, b := range q.buckets {
		if len(b.members) > 0 {
			reads = append(reads, key)
		}
	}
	q.mu.Unlock()

	for _, h := range held {
		res := make([]quota.ReportResult, len(h.bs))
		if err := q.ledger.Resolve(ctx, q.instance, h.seq, h.bs, res); err != nil {
			q.mu.Lock()
			q.held = append(q.held, h)
			q.mu.Unlock()
			continue
		}
		q.mu.Lock()
		q.apply(now, h.items, res)
		q.mu.Unlock()
	}
	if len(bs) > 0 {
		seq := q.seq.Add(1)
		res := make([]quota.ReportResult, len(bs))
		known := q.charge(ctx, seq, bs, res)
		q.mu.Lock()
		if known {
			q.apply(now, items, res)
		} else {
			q.held = append(q.held, heldCall{seq: seq, bs: bs, items: items, at: now})
		}
		q.mu.Unlock()
	}
	states, err := q.board.sync(ctx, removals, reads)
	if err != nil {
		q.logf("floodgate-rls: RLQS: board", err)
	}
	posts := map[string]boardBatch{}
	var plans []plan
	q.mu.Lock()
	q.setBoards(states)
	for key, b := range q.buckets {
		if !b.owing() && b.inflight == 0 {
			b.judge(now, false, 0)
		}
		plans = q.replan(b, now, posts, plans)
		if len(b.members) == 0 && !b.owing() && b.inflight == 0 {
			delete(q.buckets, key)
		}
	}
	q.mu.Unlock()
	if len(posts) > 0 {
		states, err := q.board.sync(ctx, posts, nil)
		if err != nil {
			q.logf("floodgate-rls: RLQS: board", err)
		}
		q.mu.Lock()
		q.setBoards(states)
		for _, p := range plans {
			if p.m.s.members[p.m.idKey] != p.m { // dropped or abandoned meanwhile
				continue
			}
			if a := q.settle(p, states); !a.sameStrategy(p.m.sent) {
				p.m.sent = a
				out[p.m.s] = append(out[p.m.s], a.action(p.m.id))
			}
		}
		q.mu.Unlock()
	}
	for s, actions := range out {
		_ = s.send(actions) // a stream that failed ends on its own
	}
}

// replan plans the members of b whose share changed (the bucket
// exhausted or recovered, a client came or went, a demand changed):
// shrinking ones first, so that the board grants the growing ones the
// room they leave. q.mu is held.
func (q *QuotaServer) replan(b *qBucket, now time.Time, posts map[string]boardBatch, plans []plan) []plan {
	var shrink, grow []*qMember
	for m := range b.members {
		if m.sent.kind == assignNone {
			continue // not answered yet: its report's reply comes
		}
		want := 0.0
		if !b.exhausted {
			claims, i := b.claims(m)
			want = fairShare(b.rate, claims, i)
		}
		switch tol := 1e-6 * max(1, want); {
		case want < m.assigned-tol || b.exhausted && m.sent.kind != assignDeny:
			shrink = append(shrink, m)
		case want > m.assigned+tol && !(m.sent.kind == assignBucket && m.assigned >= 0.98*want):
			grow = append(grow, m)
		}
	}
	for _, m := range append(shrink, grow...) {
		plans = append(plans, q.plan(m, now, posts))
	}
	return plans
}

// dropSilent forgets the members whose client has missed a report by
// more than its TTL (a client gone without closing its stream): their
// claims leave the board. q.mu is held.
func (q *QuotaServer) dropSilent(now time.Time, removals map[string]boardBatch) {
	for s := range q.streams {
		for key, m := range s.members {
			if now.Sub(m.lastReport) <= 2*m.cadence+2*time.Second {
				continue
			}
			if m.b != nil {
				removeClaim(removals, m)
			}
			delete(s.members, key)
		}
	}
}

// abandonUnmapped, after a policy reload, resolves every member's bucket
// id again: one that now maps elsewhere (or to nothing: its rule was
// removed) is abandoned, so the client drops it and reports it afresh
// under the new policy; one that maps to the same buckets takes their
// new limits. q.mu is held.
func (q *QuotaServer) abandonUnmapped(out map[*qStream][]*rlqsv3.RateLimitQuotaResponse_BucketAction, removals map[string]boardBatch) {
	p := q.limiter.Policy()
	if p == q.policy {
		return
	}
	q.policy = p
	for s := range q.streams {
		for key, m := range s.members {
			kind, bkey, bs, err := q.resolve(s.domain, m.id)
			old := ""
			if m.b != nil {
				old = m.b.key
			}
			if err == nil && kind == m.static && bkey == old {
				if m.b != nil {
					m.b.setLimits(bs)
				}
				continue
			}
			out[s] = append(out[s], abandonAction(m.id))
			if m.b != nil {
				removeClaim(removals, m)
			}
			delete(s.members, key)
		}
	}
}

// removeClaim adds the removal of m's claim to posts and takes m out of
// its bucket.
func removeClaim(posts map[string]boardBatch, m *qMember) {
	batch := posts[m.b.key]
	batch.rate = m.b.rate
	batch.posts = append(batch.posts, boardPost{member: m.boardID})
	posts[m.b.key] = batch
	m.b.remove(m)
}
