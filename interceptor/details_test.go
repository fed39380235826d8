package interceptor

import (
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
)

// TestDenyStatusSharedDetails: the details a rule's denies share are
// marshalled once, yet every deny carries its own retry delay, and a rule
// with another limit (a tier), another domain or a hidden quota gets its
// own.
func TestDenyStatusSharedDetails(t *testing.T) {
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

	first := DenyStatus(d, "a.example")
	checkDetails(t, first, info("1000", "a.example"), &errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Millisecond)},
		quota(1000, "rate limit of 1000 per 1s exceeded"))

	d.RetryAfter = 7 * time.Millisecond
	checkDetails(t, DenyStatus(d, "a.example"), info("1000", "a.example"), &errdetails.RetryInfo{RetryDelay: durationpb.New(7 * time.Millisecond)},
		quota(1000, "rate limit of 1000 per 1s exceeded"))

	d.Limit = 10 // the same rule for another tier
	checkDetails(t, DenyStatus(d, "a.example"), info("10", "a.example"), &errdetails.RetryInfo{RetryDelay: durationpb.New(7 * time.Millisecond)},
		quota(10, "rate limit of 10 per 1s exceeded"))

	checkDetails(t, DenyStatus(d, "b.example"), info("10", "b.example"), &errdetails.RetryInfo{RetryDelay: durationpb.New(7 * time.Millisecond)},
		quota(10, "rate limit of 10 per 1s exceeded"))

	d.HideQuota, d.RetryAfter = true, 0
	checkDetails(t, DenyStatus(d, "b.example"), &errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Domain: "b.example", Metadata: map[string]string{"stage": "tiers"}})
}

// TestDenyStatusSharedDetailsSeveralWindows: a deny that violated several
// windows lists each in its QuotaFailure, and a deny of the same binding
// window with another set of violated windows gets its own list.
func TestDenyStatusSharedDetailsSeveralWindows(t *testing.T) {
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
