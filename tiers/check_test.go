package tiers_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/tiers"
)

func TestValidateTake(t *testing.T) {
	ok := tiers.Limit{Rate: 1, Period: time.Second, Burst: 1}
	b := func(key string, cost int64) tiers.Bucket { return tiers.Bucket{Key: key, Limit: ok, Cost: cost} }
	cases := []struct {
		name    string
		buckets []tiers.Bucket
		res     int
		want    string // "" for valid
	}{
		{"empty take", nil, 0, ""},
		{"valid", []tiers.Bucket{b("a", 1), b("b", 0)}, 3, ""},
		{"res too short", []tiers.Bucket{b("a", 1), b("b", 1)}, 1, "tiers: res has room for 1 results, want one per bucket (2)"},
		{"empty key", []tiers.Bucket{b("a", 1), b("", 1)}, 2, `tiers: bucket 1 (""): key is empty`},
		{"same key", []tiers.Bucket{b("a", 1), b("b", 1), b("a", 1)}, 3, `tiers: bucket 2 ("a"): same key as bucket 0`},
		{"bad limit", []tiers.Bucket{{Key: "a", Limit: tiers.Limit{Rate: 1, Period: time.Second}, Cost: 1}}, 1,
			`tiers: bucket 0 ("a"): burst 0 is out of range [1, 1000000000]`},
		{"negative cost", []tiers.Bucket{b("a", 1), b("b", 1), b("fg:x", -1)}, 3, `tiers: bucket 2 ("fg:x"): cost -1 is negative`},
		{"unknown OnStoreError", []tiers.Bucket{{Key: "a", Limit: ok, Cost: 1, OnStoreError: 7}}, 1, `tiers: bucket 0 ("a"): OnStoreError 7 is unknown`},
		// The first problem is reported: bucket 0's before bucket 1's, and
		// within a bucket in the documented order.
		{"first problem", []tiers.Bucket{{Key: "a", Cost: -1}, {Key: ""}}, 2, `tiers: bucket 0 ("a"): rate 0 is out of range [1, 1000000000]`},
	}
	for _, c := range cases {
		err := tiers.ValidateTake(c.buckets, make([]tiers.Result, c.res))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s: ValidateTake = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestValidateTakeDoesNotAllocate(t *testing.T) {
	bs := []tiers.Bucket{
		{Key: "fg:t", Limit: tiers.Limit{Algorithm: tiers.FixedWindow, Rate: 100, Period: time.Minute}, Cost: 1},
		{Key: "fg:u", Limit: tiers.Limit{Rate: 10, Period: time.Second, Burst: 10}, Cost: 1},
		{Key: "fg:k", Limit: tiers.Limit{Algorithm: tiers.GCRA, Rate: 10, Period: time.Second, Burst: 10}, Cost: 1, OnStoreError: tiers.FailClosed},
	}
	res := make([]tiers.Result, len(bs))
	if n := testing.AllocsPerRun(100, func() {
		if err := tiers.ValidateTake(bs, res); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("ValidateTake allocates %v times per valid take", n)
	}
}

func TestValidateRefund(t *testing.T) {
	tb := tiers.Bucket{Key: "k", Cost: 1, Limit: tiers.Limit{Algorithm: tiers.TokenBucket, Rate: 1, Period: time.Second, Burst: 1}}
	fw := tb
	fw.Key, fw.Limit = "w", tiers.Limit{Algorithm: tiers.FixedWindow, Rate: 1, Period: time.Second}
	neg := tb
	neg.Cost = -1
	for _, tc := range []struct {
		bs   []tiers.Bucket
		want string
	}{
		{[]tiers.Bucket{tb}, ""},
		{[]tiers.Bucket{tb, fw}, `tiers: bucket 1 ("w"): fixed_window has no refund (token_bucket and gcra only)`},
		{[]tiers.Bucket{neg}, `tiers: bucket 0 ("k"): cost -1 is negative`},
	} {
		err := tiers.ValidateRefund(tc.bs)
		if (err == nil) != (tc.want == "") || (err != nil && err.Error() != tc.want) {
			t.Errorf("ValidateRefund = %v, want %q", err, tc.want)
		}
	}
}
