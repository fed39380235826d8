package quota_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// TestDecideUnavailable: the fail modes, decided in one place, exactly.
func TestDecideUnavailable(t *testing.T) {
	tb := func(key string, burst, cost int64, mode quota.FailMode) quota.Bucket {
		return quota.Bucket{Key: key, Rule: key, Cost: cost, OnStoreError: mode,
			Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: burst, Period: time.Second, Burst: burst}}
	}
	open, closed, local := tb("open", 10, 3, quota.FailOpen), tb("closed", 5, 1, quota.FailClosed), tb("local", 4, 1, quota.FailLocal)
	tooBig := tb("big", 2, 3, quota.FailOpen)

	res := make([]quota.Result, 3)
	if !quota.DecideUnavailable([]quota.Bucket{open}, res, nil) {
		t.Fatal("open bucket denied")
	}
	if want := (quota.Result{Allowed: true, Limit: 10, Remaining: 7, Source: floodgate.SourceFailOpen}); res[0] != want {
		t.Errorf("open: %+v, want %+v", res[0], want)
	}

	// A closed bucket denies the whole take; the local decider is told
	// the take cannot pass, so it charges nothing.
	var sawAllowed []bool
	localFn := func(bs []quota.Bucket, rs []quota.Result, allowed bool) bool {
		sawAllowed = append(sawAllowed, allowed)
		for i := range bs {
			if bs[i].OnStoreError == quota.FailLocal {
				if rs[i].Source != floodgate.SourceLocalFallback || rs[i].Limit != bs[i].Limit.Capacity() {
					t.Errorf("local bucket preset %+v", rs[i])
				}
				rs[i].Allowed = allowed
			}
		}
		return allowed
	}
	if quota.DecideUnavailable([]quota.Bucket{open, closed, local}, res, localFn) {
		t.Fatal("a closed bucket did not deny")
	}
	if want := (quota.Result{Limit: 5, RetryAfter: quota.StoreErrorRetryAfter, Reset: quota.StoreErrorRetryAfter, Source: floodgate.SourceFailClosed}); res[1] != want {
		t.Errorf("closed: %+v, want %+v", res[1], want)
	}
	if len(sawAllowed) != 1 || sawAllowed[0] {
		t.Errorf("local decider saw allowed=%v, want one call with false", sawAllowed)
	}

	// A cost above capacity denies with Never whatever the mode.
	if quota.DecideUnavailable([]quota.Bucket{tooBig}, res, nil) || res[0].RetryAfter != quota.Never {
		t.Errorf("cost above capacity: %+v", res[0])
	}

	// Without a local decider, local acts as open.
	if !quota.DecideUnavailable([]quota.Bucket{local}, res, nil) || res[0].Source != floodgate.SourceFailOpen || res[0].Remaining != 3 {
		t.Errorf("local without a decider: %+v", res[0])
	}
}
