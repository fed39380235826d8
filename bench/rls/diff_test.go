package main

import (
	"slices"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func limited(code rlsv3.RateLimitResponse_Code, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, name string, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, LimitRemaining: rem, CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit, Name: name}}
}

func answer(sts ...*rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse {
	r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: sts}
	for _, st := range sts {
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			r.OverallCode = st.Code
		}
	}
	return r
}

// The classifier on answers written out: what the documented
// differences explain passes, anything else fails with its own kind.
func TestDiffClassifier(t *testing.T) {
	t.Parallel()
	model, err := newRLModel(diffConfigs)
	if err != nil {
		t.Fatal(err)
	}
	const (
		ok   = rlsv3.RateLimitResponse_OK
		over = rlsv3.RateLimitResponse_OVER_LIMIT
		hour = rlsv3.RateLimitResponse_RateLimit_HOUR
		min  = rlsv3.RateLimitResponse_RateLimit_MINUTE
	)
	two := call("shop", 0, dsc("tenant", "acme"), dsc("tenant", "acme", "route", "/cart"))
	alone := call("shop", 0, dsc("tenant", "acme"))
	steps := []struct {
		req      *rlsv3.RateLimitRequest
		env, fg  *rlsv3.RateLimitResponse
		fgErr    error
		want     []string
		wantFail bool
	}{
		{two, answer(limited(ok, 5, hour, "", 4), limited(ok, 3, min, "", 2)), answer(limited(ok, 5, hour, "shop.tenant", 4), limited(ok, 3, min, "shop.tenant.route", 2)), nil, []string{kindName}, false},
		{two, answer(limited(ok, 5, hour, "", 3), limited(ok, 3, min, "", 1)), answer(limited(ok, 5, hour, "", 3), limited(ok, 3, min, "", 1)), nil, nil, false},
		{two, answer(limited(ok, 5, hour, "", 2), limited(ok, 3, min, "", 0)), answer(limited(ok, 5, hour, "", 2), limited(ok, 3, min, "", 0)), nil, nil, false},
		// Denied: envoyproxy/ratelimit charges the tenant, floodgate-rls
		// answers what it has left, uncharged.
		{two, answer(limited(ok, 5, hour, "", 1), limited(over, 3, min, "", 0)), answer(limited(ok, 5, hour, "", 2), limited(over, 3, min, "", 0)), nil, []string{kindAllOrNothing}, false},
		{two, answer(limited(ok, 5, hour, "", 0), limited(over, 3, min, "", 0)), answer(limited(ok, 5, hour, "", 2), limited(over, 3, min, "", 0)), nil, []string{kindAllOrNothing}, false},
		{alone, answer(limited(over, 5, hour, "", 0)), answer(limited(ok, 5, hour, "", 1)), nil, []string{kindAllOrNothing}, false},
		// One more than the documented differences explain.
		{alone, answer(limited(over, 5, hour, "", 0)), answer(limited(ok, 5, hour, "", 1)), nil, []string{kindCode}, true},
		{call("shop", 0, dsc("remote_address", "192.0.2.99")), answer(limited(ok, 6, min, "", 5)), answer(limited(ok, 6, min, "", 4)), nil, []string{kindRemaining}, true},
		{call("shop", 0, dsc("remote_address", "192.0.2.98")), answer(limited(over, 6, min, "", 0)), answer(limited(over, 6, min, "", 3)), nil, []string{kindOverRemaining}, true},
		{call("edge", 0, dsc("path", "/beta")), answer(limited(ok, 2, min, "", 1)), answer(&rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}), nil, []string{kindShadow}, false},
		{call("shop", 0, dl(2, 2, "remote_address", "192.0.2.97")), answer(limited(ok, 2, min, "", 1)), nil, status.Error(codes.InvalidArgument, "no"), []string{kindCallRefused}, true},
		{call("shop", 0, dsc("remote_address", "192.0.2.97")), answer(limited(ok, 6, min, "", 4)), answer(limited(ok, 6, min, "", 5)), nil, []string{kindAfterRefused}, true},
	}
	cmp := newComparer(model)
	for i, s := range steps {
		res := &diffResult{second: "floodgate"}
		cmp.compare(res, "t", i, s.req, s.env, nil, s.fg, s.fgErr)
		var got []string
		for _, r := range res.records {
			got = append(got, r.kind)
		}
		if !slices.Equal(got, s.want) || res.failed() != s.wantFail {
			t.Errorf("step %d: kinds %q (fails %v), want %q (fails %v)", i, got, res.failed(), s.want, s.wantFail)
		}
	}
}
