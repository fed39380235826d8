package tiers_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
)

// TestNewLimiterOptionErrors: NewLimiter reports every bad option at once,
// naming it, and a nil option is one of them.
func TestNewLimiterOptionErrors(t *testing.T) {
	p, err := tiers.Load([]byte("rules:\n  - {name: a, rate: 1/1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tiers.NewLimiter(newMemstore(t), p, tiers.WithKeyPrefix("bad prefix"), nil)
	if err == nil {
		t.Fatal("NewLimiter accepted a bad prefix and a nil option")
	}
	if !errors.Is(err, tiers.ErrKeyPrefix) {
		t.Errorf("err = %v, want ErrKeyPrefix", err)
	}
	for _, want := range []string{`tiers: WithKeyPrefix:`, `"bad prefix"`, "tiers: nil Option"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q does not mention %s", err, want)
		}
	}
}

// TestConsistencyReachesBuckets: a rule's consistency and sync interval
// (defaulted) are on every bucket it charges.
func TestConsistencyReachesBuckets(t *testing.T) {
	p, err := tiers.Load([]byte(`
rules:
  - {name: a, key: [user], rate: 10/1s, consistency: async}
  - {name: b, key: [user], rate: 10/1s, consistency: async, sync_interval: 20ms}
  - {name: c, key: [user], rate: 10/1s, algorithm: gcra, consistency: leased}
  - {name: d, key: [user], rate: 10/1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(newLocalFirst(t), p)
	if err != nil {
		t.Fatal(err)
	}
	bs := l.Buckets(nil, &floodgate.Request{Identity: floodgate.Identity{User: "u"}})
	want := map[string]struct {
		c  quota.Consistency
		iv time.Duration
	}{"a": {quota.Async, tiers.DefaultSyncInterval}, "b": {quota.Async, 20 * time.Millisecond}, "c": {quota.Leased, 0}, "d": {quota.Exact, 0}}
	if len(bs) != 4 {
		t.Fatalf("%d buckets", len(bs))
	}
	for _, b := range bs {
		if w := want[b.Rule]; b.Consistency != w.c || b.SyncInterval != w.iv {
			t.Errorf("rule %s: %s every %s, want %s every %s", b.Rule, b.Consistency, b.SyncInterval, w.c, w.iv)
		}
	}
}
