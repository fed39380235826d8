package rls

import (
	"math"
	"slices"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// assignKind is the kind of an assignment.
type assignKind uint8

const (
	assignNone   assignKind = iota // nothing sent yet
	assignAllow                    // blanket ALLOW_ALL
	assignDeny                     // blanket DENY_ALL
	assignBucket                   // token_bucket
)

// assignment is a quota assignment as sent: its strategy and TTL.
type assignment struct {
	kind   assignKind
	tokens uint32        // tokens_per_fill
	fill   time.Duration // fill_interval, whole seconds
	max    uint32        // max_tokens
	ttl    time.Duration // assignment_time_to_live, whole seconds
}

// sameStrategy reports whether a and b configure the client alike (the
// TTL aside): a client keeps the state of a token bucket whose
// configuration does not change.
func (a assignment) sameStrategy(b assignment) bool {
	return a.kind == b.kind && a.tokens == b.tokens && a.fill == b.fill && a.max == b.max
}

// rate is the assignment's rate, in units per second.
func (a assignment) rate() float64 {
	if a.kind != assignBucket {
		return 0
	}
	return float64(a.tokens) / a.fill.Seconds()
}

// Bounds of a token bucket assignment.
const (
	// maxFill is the longest fill interval an assignment uses: a rate
	// below 1/maxFill per second is assigned DENY_ALL.
	maxFill = 10
	// burstOf is the share of a second of its rate a token bucket holds
	// at most (max_tokens, at least 1): what a client admits at once
	// when it gets a new bucket, which starts full.
	burstOf = 0.25
)

// tokenBucket returns the token bucket closest below rate (units per
// second) with whole-second fill intervals: tokens_per_fill/fill_interval
// with the fill interval of 1 to maxFill seconds that loses the least of
// rate (the shortest of equals), and max_tokens a quarter second of it,
// at least 1. A rate it cannot express (below 1/maxFill) is DENY_ALL.
func tokenBucket(rate float64, ttl time.Duration) assignment {
	best := assignment{kind: assignDeny, ttl: ttl}
	bestRate := 0.0
	if rate <= 0 || math.IsNaN(rate) {
		return best
	}
	for f := 1; f <= maxFill; f++ {
		n := math.Floor(rate*float64(f) + 1e-9)
		if n < 1 {
			continue
		}
		n = min(n, math.MaxUint32)
		if r := n / float64(f); r > bestRate+1e-9 {
			bestRate = r
			best = assignment{kind: assignBucket, tokens: uint32(n), fill: time.Duration(f) * time.Second, ttl: ttl}
		}
	}
	if best.kind == assignBucket {
		best.max = uint32(max(1, math.Ceil(bestRate*burstOf)))
	}
	return best
}

// action is the bucket action of a for the bucket id.
func (a assignment) action(id map[string]string) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	qa := &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
		AssignmentTimeToLive: &durationpb.Duration{Seconds: int64(a.ttl / time.Second)},
	}
	switch a.kind {
	case assignAllow:
		qa.RateLimitStrategy = blanket(typev3.RateLimitStrategy_ALLOW_ALL)
	case assignDeny:
		qa.RateLimitStrategy = blanket(typev3.RateLimitStrategy_DENY_ALL)
	case assignBucket:
		qa.RateLimitStrategy = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens:     a.max,
			TokensPerFill: wrapperspb.UInt32(a.tokens),
			FillInterval:  &durationpb.Duration{Seconds: int64(a.fill / time.Second)},
		}}}
	}
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId:     &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: qa},
	}
}

func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

// abandonAction tells the client to drop the bucket id.
func abandonAction(id map[string]string) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
	}
}

// claim is one client's claim on a bucket: its demand (units per second;
// negative: not known yet) and what it holds (assigned, units per
// second).
type claim struct {
	demand, assigned float64
}

// wantOf is what a demand asks for: a tenth more, and at least one more
// unit a second, so a client whose demand grows is seen growing; an
// unknown demand asks for everything.
func wantOf(demand float64) float64 {
	if demand < 0 {
		return math.Inf(1)
	}
	return max(demand*1.1, demand+1)
}

// fairShare is claim i's max-min fair share of rate among claims, each
// asking wantOf its demand: those that ask less than an equal split get
// what they ask, the rest split what remains equally; what is left when
// every claim has what it asks is split equally too, so a client's
// demand can grow before its next report.
func fairShare(rate float64, claims []claim, i int) float64 {
	wants := make([]float64, len(claims))
	for k, c := range claims {
		wants[k] = wantOf(c.demand)
	}
	order := make([]int, len(claims))
	for k := range order {
		order[k] = k
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case wants[a] < wants[b]:
			return -1
		case wants[a] > wants[b]:
			return 1
		}
		return 0
	})
	left, mine := rate, 0.0
	for n, k := range order {
		got := min(wants[k], left/float64(len(order)-n))
		if k == i {
			mine = got
		}
		left -= got
	}
	return mine + max(0, left)/float64(len(claims))
}
