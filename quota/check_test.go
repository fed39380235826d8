package quota_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

func TestValidateTake(t *testing.T) {
	ok := quota.Limit{Rate: 1, Period: time.Second, Burst: 1}
	b := func(key string, cost int64) quota.Bucket { return quota.Bucket{Key: key, Limit: ok, Cost: cost} }
	cases := []struct {
		name    string
		buckets []quota.Bucket
		res     int
		want    string // "" for valid
	}{
		{"empty take", nil, 0, ""},
		{"valid", []quota.Bucket{b("a", 1), b("b", 0)}, 3, ""},
		{"res too short", []quota.Bucket{b("a", 1), b("b", 1)}, 1, "quota: res has room for 1 results, want one per bucket (2)"},
		{"empty key", []quota.Bucket{b("a", 1), b("", 1)}, 2, `quota: bucket 1 (""): key is empty`},
		{"same key", []quota.Bucket{b("a", 1), b("b", 1), b("a", 1)}, 3, `quota: bucket 2 ("a"): same key as bucket 0`},
		{"bad limit", []quota.Bucket{{Key: "a", Limit: quota.Limit{Rate: 1, Period: time.Second}, Cost: 1}}, 1,
			`quota: bucket 0 ("a"): burst 0 is out of range [1, 1000000000]`},
		{"negative cost", []quota.Bucket{b("a", 1), b("b", 1), b("fg:x", -1)}, 3, `quota: bucket 2 ("fg:x"): cost -1 is negative`},
		{"unknown OnStoreError", []quota.Bucket{{Key: "a", Limit: ok, Cost: 1, OnStoreError: 7}}, 1, `quota: bucket 0 ("a"): OnStoreError 7 is unknown`},
		// The first problem is reported: bucket 0's before bucket 1's, and
		// within a bucket in the documented order.
		{"first problem", []quota.Bucket{{Key: "a", Cost: -1}, {Key: ""}}, 2, `quota: bucket 0 ("a"): rate 0 is out of range [1, 1000000000]`},
	}
	for _, c := range cases {
		err := quota.ValidateTake(c.buckets, make([]quota.Result, c.res))
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
	bs := []quota.Bucket{
		{Key: "fg:t", Limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 100, Period: time.Minute}, Cost: 1},
		{Key: "fg:u", Limit: quota.Limit{Rate: 10, Period: time.Second, Burst: 10}, Cost: 1},
		{Key: "fg:k", Limit: quota.Limit{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 10}, Cost: 1, OnStoreError: quota.FailClosed},
	}
	res := make([]quota.Result, len(bs))
	if n := testing.AllocsPerRun(100, func() {
		if err := quota.ValidateTake(bs, res); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("ValidateTake allocates %v times per valid take", n)
	}
}
