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
		return &errdetails.ErrorInfo{Reason: ReasonRateLimit, Domain: domain, Metadata: map[string]string{
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
	checkDetails(t, DenyStatus(d, "b.example"), &errdetails.ErrorInfo{Reason: ReasonRateLimit, Domain: "b.example", Metadata: map[string]string{"stage": "tiers"}})
}
