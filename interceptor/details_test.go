package interceptor

import (
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
)

// TestDenyStatusSharedDetails: the details a rule's denies share are
// marshalled once, yet every deny carries its own retry delay, and a rule
// with another limit (a tier), another domain or a hidden quota gets its
// own. The sharing is seen in the cache DenyStatus reads (ruleDetails):
// each deny's ErrorInfo and QuotaFailure are the ones marshalled for its
// rule's first deny, the very same values (not marshalled again), and
// they are never changed by the denies that carried them.
func TestDenyStatusSharedDetails(t *testing.T) {
	t.Parallel()
	d := floodgate.Decision{Stage: floodgate.StageTiers, Policy: "shared-user", Limit: 1000, Window: time.Second, RetryAfter: 2 * time.Millisecond}
	info := func(limit, domain string) *errdetails.ErrorInfo {
		return &errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Domain: domain, Metadata: map[string]string{
			"stage": "tiers", "policy": "shared-user", "limit": limit, "window_seconds": "1",
		}}
	}
	quota := func(limit int64, desc string) *errdetails.QuotaFailure {
		return &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject: "shared-user", Description: desc, QuotaId: "shared-user", QuotaValue: limit,
		}}}
	}
	// deny is DenyStatus(d, domain) and the rule's shared details, which
	// the status carries: its ErrorInfo first and its QuotaFailure last.
	deny := func(d floodgate.Decision, domain string) (*status.Status, *fixedDetails) {
		t.Helper()
		st := DenyStatus(d, domain)
		sem := d.Stage.Semantics()
		f := ruleDetails(d, &sem, domain, !d.HideQuota && d.Policy != "")
		got := st.Proto().GetDetails()
		if f == nil || len(got) == 0 || !proto.Equal(got[0], f.errorInfo) || f.quota != nil && !proto.Equal(got[len(got)-1], f.quota) {
			t.Fatalf("%s: the deny's details %v are not its rule's shared ones %+v", domain, got, f)
		}
		return st, f
	}

	st, rule := deny(d, "a.example")
	checkDetails(t, st, info("1000", "a.example"), &errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Millisecond)},
		quota(1000, "rate limit of 1000 per 1s exceeded"))

	d.RetryAfter = 7 * time.Millisecond
	st, again := deny(d, "a.example")
	checkDetails(t, st, info("1000", "a.example"), &errdetails.RetryInfo{RetryDelay: durationpb.New(7 * time.Millisecond)},
		quota(1000, "rate limit of 1000 per 1s exceeded"))
	if again != rule {
		t.Errorf("the rule's second deny (another retry delay) has details of its own: marshalled again")
	}

	d.Limit = 10 // the same rule for another tier
	st, tier := deny(d, "a.example")
	checkDetails(t, st, info("10", "a.example"), &errdetails.RetryInfo{RetryDelay: durationpb.New(7 * time.Millisecond)},
		quota(10, "rate limit of 10 per 1s exceeded"))

	st, domain := deny(d, "b.example")
	checkDetails(t, st, info("10", "b.example"), &errdetails.RetryInfo{RetryDelay: durationpb.New(7 * time.Millisecond)},
		quota(10, "rate limit of 10 per 1s exceeded"))

	d.HideQuota, d.RetryAfter = true, 0
	st, hidden := deny(d, "b.example")
	checkDetails(t, st, &errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Domain: "b.example", Metadata: map[string]string{"stage": "tiers"}})

	for name, f := range map[string]*fixedDetails{"another tier": tier, "another domain": domain, "a hidden quota": hidden} {
		for other, g := range map[string]*fixedDetails{"the rule": rule, "another tier": tier, "another domain": domain, "a hidden quota": hidden} {
			if other != name && f == g {
				t.Errorf("%s shares the details of %s", name, other)
			}
		}
	}
	if _, f := deny(d, "b.example"); f != hidden {
		t.Errorf("a hidden quota's second deny has details of its own: marshalled again")
	}
	// What the denies carried was copied: the shared details are as
	// first marshalled.
	for _, c := range []struct {
		a    *anypb.Any
		want proto.Message
	}{{rule.errorInfo, info("1000", "a.example")}, {rule.quota, quota(1000, "rate limit of 1000 per 1s exceeded")}} {
		if m, err := c.a.UnmarshalNew(); err != nil || !proto.Equal(m, c.want) {
			t.Errorf("shared detail %v (%v), want %v", m, err, c.want)
		}
	}
}

// TestDenyStatusSharedDetailsSeveralWindows: a deny that violated several
// windows lists each in its QuotaFailure, and a deny of the same binding
// window with another set of violated windows gets its own list.
func TestDenyStatusSharedDetailsSeveralWindows(t *testing.T) {
	t.Parallel()
	d := floodgate.Decision{Stage: floodgate.StageTiers, Policy: "multi-user", Limit: 10, Window: time.Second, RetryAfter: time.Second}
	user := floodgate.Quota{Policy: "multi-user", Limit: 10, Window: time.Second, Violated: true}
	key := floodgate.Quota{Policy: "multi-key", Limit: 20, Window: time.Second, Violated: true}
	day := floodgate.Quota{Policy: "multi-user/1d", Limit: 1000, Window: 24 * time.Hour}
	violation := func(q floodgate.Quota, desc string) *errdetails.QuotaFailure_Violation {
		return &errdetails.QuotaFailure_Violation{Subject: q.Policy, Description: desc, QuotaId: q.Policy, QuotaValue: q.Limit}
	}
	info := &errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Domain: "m.example", Metadata: map[string]string{
		"stage": "tiers", "policy": "multi-user", "limit": "10", "window_seconds": "1",
	}}
	retry := &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)}

	d.SetQuotas([]floodgate.Quota{user, day, key})
	checkDetails(t, DenyStatus(d, "m.example"), info, retry, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{
		violation(user, "rate limit of 10 per 1s exceeded"), violation(key, "rate limit of 20 per 1s exceeded"),
	}})
	d.SetQuotas([]floodgate.Quota{user, day})
	checkDetails(t, DenyStatus(d, "m.example"), info, retry, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{
		violation(user, "rate limit of 10 per 1s exceeded"),
	}})
	day.Violated = true
	d.SetQuotas([]floodgate.Quota{user, day})
	checkDetails(t, DenyStatus(d, "m.example"), info, retry, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{
		violation(user, "rate limit of 10 per 1s exceeded"), violation(day, "rate limit of 1000 per 24h0m0s exceeded"),
	}})
}

// TestRetryInfoEncoding: the hand-encoded RetryInfo is what anypb.New
// gives the same delay, byte for byte, and reads back as that delay, from
// a nanosecond to the longest Duration.
func TestRetryInfoEncoding(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{
		1, 999, time.Microsecond, 1500 * time.Microsecond, 999_999_999, time.Second,
		time.Second + 1, 7*time.Second + 250*time.Millisecond, 90 * time.Minute, 1<<63 - 1,
	} {
		want, err := anypb.New(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
		if err != nil {
			t.Fatal(err)
		}
		got := retryInfo(d)
		if !proto.Equal(got, want) || string(got.Value) != string(want.Value) {
			t.Errorf("retryInfo(%v) = %q %x, want %q %x", d, got.TypeUrl, got.Value, want.TypeUrl, want.Value)
			continue
		}
		var ri errdetails.RetryInfo
		if err := got.UnmarshalTo(&ri); err != nil || ri.GetRetryDelay().AsDuration() != d {
			t.Errorf("retryInfo(%v) reads back as %v (%v)", d, ri.GetRetryDelay().AsDuration(), err)
		}
	}
}
