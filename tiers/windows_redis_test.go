package tiers_test

import (
	"slices"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// The windows and header scopes against a real 3-master Redis Cluster, on
// fake time: a user's windows and a header-keyed rule live in different
// slots; a deny by the hour window (one slot) leaves the minute window and
// the other slot's bucket as they were; the keys in Redis are the ones the
// policy builds, and a hostile header value lands in its own slot.
func TestWindowsAndHeadersOnRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t)
	clk := clock.New(time.Unix(1_800_000_000, 0))
	s, err := redisstore.New(cl.Client(), redisstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	l := mustLimiter(t, s, `
rules:
  - {name: plan, key: [user], rate: [3/1m, 4/1h], algorithm: fixed_window}
  - {name: region, key: [header:x-region], rate: 100/1m, algorithm: fixed_window}
`)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "bob"}, Headers: []floodgate.Header{{Name: "x-region", Value: "eu}{x"}}}
	want := []string{"fg:{user=bob}:plan:fixed_window:1m", "fg:{user=bob}:plan:fixed_window:1h", "fg:{header.x-region=eu%7D%7Bx}:region:fixed_window"}
	bs := l.Buckets(nil, r)
	if got := keys(bs); !slices.Equal(got, want) {
		t.Fatalf("keys %q, want %q", got, want)
	}
	slotOf := func(k string) int64 {
		n, err := cl.Client().ClusterKeySlot(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if slotOf(want[2]) != slotOf("{header.x-region=eu%7D%7Bx}") || slotOf(want[0]) != slotOf(want[1]) || slotOf(want[0]) == slotOf(want[2]) {
		t.Fatalf("slots: %d %d %d: the header key must hash on its own tag, the windows of one user share one", slotOf(want[0]), slotOf(want[1]), slotOf(want[2]))
	}
	// count is a bucket's raw state in Redis (a fixed window keeps a
	// string), so the test sees what the store wrote, not what it reports.
	count := func(k string) string {
		v, err := cl.Client().Get(t.Context(), k).Result()
		if err != nil {
			t.Fatalf("GET %s: %v", k, err)
		}
		return v
	}
	for i := range 3 {
		if d := admit(t, l, r); !d.Allowed {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	if d := admit(t, l, r); d.Allowed || d.Policy != "plan/1m" {
		t.Fatalf("4th: %+v, want plan/1m to deny", d)
	}
	clk.Advance(time.Minute)
	if d := admit(t, l, r); !d.Allowed {
		t.Fatalf("a minute later: %+v", d)
	}
	before := map[string]string{}
	for _, k := range want {
		before[k] = count(k)
	}
	d := admit(t, l, r)
	if d.Allowed || d.Policy != "plan/1h" {
		t.Fatalf("6th: %+v, want plan/1h to deny", d)
	}
	if got := []string{d.Quotas()[0].Policy, d.Quotas()[1].Policy}; !slices.Equal(got, []string{"plan/1h", "plan/1m"}) || !d.Quotas()[0].Violated || d.Quotas()[1].Violated {
		t.Errorf("6th: quotas %+v", d.Quotas())
	}
	for _, k := range want {
		if after := count(k); after != before[k] {
			t.Errorf("%s: %s -> %s after the hour window's deny, want unchanged", k, before[k], after)
		}
	}
	var _ quota.Store = s
}
