package rls

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
)

// Response header names (lower case, as HTTP/2 sends them).
const (
	HeaderRateLimitPolicy = "ratelimit-policy"
	HeaderRateLimit       = "ratelimit"
	HeaderRetryAfter      = "retry-after"
)

// response builds the answer to a call from its descriptors' decisions
// and the call's decision. The statuses, their durations and the limits
// are allocated together; limits are shared between answers (cached by
// name and rate: messages are only read once built).
func (s *Server) response(out []tiers.DescriptorDecision, call *floodgate.Decision) *rlsv3.RateLimitResponse {
	n := len(out)
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, n),
	}
	if !call.Allowed {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	sts := make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
	var durs []durationpb.Duration
	for i := range out {
		st := &sts[i]
		resp.Statuses[i] = st
		st.Code = rlsv3.RateLimitResponse_OK
		dd := &out[i]
		switch dd.Match {
		case tiers.DescriptorUnlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		case tiers.DescriptorLimited:
		default:
			continue
		}
		d := &dd.Decision
		if !d.Allowed {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if d.Policy == tiers.PolicyExempt && d.Allowed {
			st.LimitRemaining = math.MaxUint32 // never limited: as an unlimited descriptor
			continue
		}
		if d.Policy == "" || d.HideQuota || dd.Bucket.Period == 0 {
			continue // nothing to show (a deny rule has no bucket either)
		}
		name := dd.Name
		if strings.HasPrefix(d.Policy, dd.Name+"/") { // one window of several
			name = d.Policy
		}
		st.CurrentLimit = s.limits.get(name, dd.Bucket)
		if d.Allowed && !d.Shadow { // a shadow decision binds only when it would deny
			st.LimitRemaining = clampUint32(d.Remaining)
		} // over the limit: 0, as envoyproxy/ratelimit says, whatever the bucket holds
		if durs == nil {
			durs = make([]durationpb.Duration, n)
		}
		du := &durs[i]
		du.Seconds, du.Nanos = int64(d.Reset/time.Second), int32(d.Reset%time.Second)
		st.DurationUntilReset = du
	}
	if s.cfg.headers {
		resp.ResponseHeadersToAdd = quotaHeaders(out, *call)
	}
	return resp
}

// limitCache holds the current_limit messages answers share, by name and
// bucket limit: a copy-on-write map read without locks (a policy has few
// limits; bounded anyway, beyond which limits are built per answer).
type limitCache struct {
	m  atomic.Pointer[map[limitKey]*rlsv3.RateLimitResponse_RateLimit]
	mu sync.Mutex
}

type limitKey struct {
	name string
	l    quota.Limit
}

// maxCachedLimits bounds limitCache.
const maxCachedLimits = 1024

func (c *limitCache) get(name string, l quota.Limit) *rlsv3.RateLimitResponse_RateLimit {
	k := limitKey{name, l}
	if m := c.m.Load(); m != nil {
		if rl, ok := (*m)[k]; ok {
			return rl
		}
	}
	rl := currentLimit(name, l)
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[limitKey]*rlsv3.RateLimitResponse_RateLimit
	if p := c.m.Load(); p != nil {
		old = *p
	}
	if v, ok := old[k]; ok {
		return v
	}
	if len(old) >= maxCachedLimits {
		return rl
	}
	next := make(map[limitKey]*rlsv3.RateLimitResponse_RateLimit, len(old)+1)
	for kk, v := range old {
		next[kk] = v
	}
	next[k] = rl
	c.m.Store(&next)
	return rl
}

// units are Envoy's rate limit units, longest first.
var units = [...]struct {
	d    time.Duration
	unit rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR},
	{30 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH},
	{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
}

// currentLimit expresses a bucket's rate (Rate per Period) in Envoy's
// terms: the longest unit the period is a whole number of, with that
// number as unit_multiplier (omitted when 1). A period below a second, or
// not whole seconds, is converted to a rate per second when that is a
// whole number, and is reported with unit UNKNOWN otherwise.
func currentLimit(name string, l quota.Limit) *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: clampUint32(l.Rate)}
	if l.Period <= 0 {
		return rl
	}
	for _, u := range units {
		if l.Period%u.d == 0 {
			rl.Unit = u.unit
			if m := l.Period / u.d; m > 1 {
				rl.UnitMultiplier = wrapperspb.UInt32(uint32(min(m, math.MaxUint32)))
			}
			return rl
		}
	}
	// Sub-second or fractional periods: per second, when exact.
	if n := l.Rate * int64(time.Second); n/int64(time.Second) == l.Rate && n%int64(l.Period) == 0 {
		rl.RequestsPerUnit = clampUint32(n / int64(l.Period))
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_SECOND
	}
	return rl
}

func clampUint32(v int64) uint32 {
	switch {
	case v <= 0:
		return 0
	case v > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}

// quotaHeaders returns the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-10, one item per limited
// descriptor's binding policy (a policy met twice is reported once, at
// its most restrictive), leaving out shadow decisions, hidden quotas and
// names that cannot be a Structured Field String; and Retry-After on a
// deny that waiting can cure.
func quotaHeaders(out []tiers.DescriptorDecision, call floodgate.Decision) []*corev3.HeaderValue {
	var pick [tiers.MaxDescriptors]int
	n := 0
	for i := range out {
		d := &out[i].Decision
		if out[i].Match != tiers.DescriptorLimited || d.Policy == "" || d.HideQuota || d.Shadow || d.Limit <= 0 || d.Window <= 0 || !validSFString(d.Policy) {
			continue
		}
		dup := -1
		for j := range n {
			if out[pick[j]].Decision.Policy == d.Policy {
				dup = j
				break
			}
		}
		switch {
		case dup < 0:
			pick[n] = i
			n++
		case tighter(d, &out[pick[dup]].Decision):
			pick[dup] = i
		}
	}
	retry := !call.Allowed && call.RetryAfter > 0
	if n == 0 && !retry {
		return nil
	}
	var buf [512]byte
	b := buf[:0]
	hvs := make([]corev3.HeaderValue, 3)
	hs := make([]*corev3.HeaderValue, 0, 3)
	if n > 0 {
		for j := range n {
			d := &out[pick[j]].Decision
			if j > 0 {
				b = append(b, ", "...)
			}
			b = appendSFString(b, d.Policy)
			b = append(b, ";q="...)
			b = strconv.AppendInt(b, d.Limit, 10)
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, ceilSeconds(d.Window), 10)
		}
		policy := len(b)
		for j := range n {
			d := &out[pick[j]].Decision
			if j > 0 {
				b = append(b, ", "...)
			}
			b = appendSFString(b, d.Policy)
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
			b = append(b, ";t="...)
			t := d.Reset
			if !d.Allowed && d.RetryAfter > 0 {
				t = d.RetryAfter
			}
			b = strconv.AppendInt(b, ceilSeconds(t), 10)
		}
		both := string(b) // one allocation for both fields
		hvs[0] = corev3.HeaderValue{Key: HeaderRateLimitPolicy, Value: both[:policy]}
		hvs[1] = corev3.HeaderValue{Key: HeaderRateLimit, Value: both[policy:]}
		hs = append(hs, &hvs[0], &hvs[1])
	}
	if retry {
		hvs[2] = corev3.HeaderValue{Key: HeaderRetryAfter, Value: strconv.FormatInt(ceilSeconds(call.RetryAfter), 10)}
		hs = append(hs, &hvs[2])
	}
	return hs
}

// tighter reports whether a describes a more restrictive state of the same
// policy than b: a deny before an allow, then less remaining.
func tighter(a, b *floodgate.Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	return a.Remaining < b.Remaining
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// validSFString reports whether s can be an RFC 9651 String: printable
// ASCII only.
func validSFString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// appendSFString appends s (valid per validSFString) as an RFC 9651
// String: in double quotes, with \ and " escaped by a backslash.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}
