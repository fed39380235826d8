package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// broken wraps a store (single-bucket takes, as the properties make) and
// breaks one promise, as how says:
//
//	above:       reports Remaining = capacity+1 where the store says capacity
//	chargesOver: charges a cost above the capacity (as much as the
//	             capacity, when the bucket holds it) and denies it
//	notNever:    denies a cost above the capacity with RetryAfter 1s
//	oneMore:     admits one unit more than the limit (capacity+1), and
//	             reports Limit and Remaining as if it did not
//	retryShort:  reports every retry-after 1µs short
//	retryLong:   reports every retry-after I+1µs too long (I = ceil(P/N))
//	forgets:     keeps state per key and limit, so a change of limit
//	             starts afresh
type broken struct {
	inner quota.Store
	how   string
}

func (b broken) Take(ctx context.Context, bs []quota.Bucket, res []quota.Result) (bool, error) {
	if len(bs) != 1 || len(res) < 1 {
		return false, fmt.Errorf("broken %s: one bucket per take, please", b.how)
	}
	bk := bs[0]
	capacity := bk.Limit.Capacity()
	one := func(x quota.Bucket) (quota.Result, error) {
		var r [1]quota.Result
		_, err := b.inner.Take(ctx, []quota.Bucket{x}, r[:])
		return r[0], err
	}
	var r quota.Result
	var err error
	switch b.how {
	case "chargesOver", "notNever":
		if bk.Cost <= capacity {
			r, err = one(bk)
			break
		}
		if b.how == "chargesOver" {
			charge := bk
			charge.Cost = capacity
			if _, err = one(charge); err != nil {
				return false, err
			}
		}
		r, err = one(bk)
		if b.how == "notNever" {
			r.RetryAfter = time.Second
		}
	case "oneMore":
		more := bk
		if more.Limit.Algorithm == quota.TokenBucket || more.Limit.Algorithm == quota.GCRA {
			more.Limit.Burst++
		} else {
			more.Limit.Rate++
		}
		if bk.Cost > capacity { // refused as it should be, charging nothing
			more.Cost = 0
		}
		r, err = one(more)
		if bk.Cost > capacity {
			r.Allowed, r.RetryAfter = false, quota.Never
		}
		r.Limit, r.Remaining = capacity, min(r.Remaining, capacity)
	case "forgets":
		fresh := bk
		fresh.Key += fmt.Sprintf("|%d/%v/%d", bk.Limit.Rate, bk.Limit.Period, bk.Limit.Burst)
		r, err = one(fresh)
	default:
		r, err = one(bk)
	}
	if err != nil {
		return false, err
	}
	switch b.how {
	case "above":
		if r.Remaining == capacity {
			r.Remaining++
		}
	case "retryShort":
		if r.RetryAfter > time.Microsecond {
			r.RetryAfter -= time.Microsecond
		}
	case "retryLong":
		if r.RetryAfter > 0 {
			r.RetryAfter += time.Duration(refillInterval(bk.Limit)+1) * time.Microsecond
		}
	}
	res[0] = r
	return r.Allowed, nil
}

// propRun runs the properties of alg with seed on st (nil: a memstore)
// and returns what they reported and counted.
func propRun(t *testing.T, alg quota.Algorithm, seed uint64, how string) ([]string, propStats) {
	t.Helper()
	clk := clock.New(time.Time{})
	var st quota.Store = mem(t, clk)
	if how != "" {
		st = broken{st, how}
	}
	var stats propStats
	msgs := runRecorded(func(r reporter) {
		stats = checkProperties(r, st, clk, "p:", propConfig{alg: alg, seed: seed, sequences: propSequences, steps: propSteps})
	})
	return msgs, stats
}

// Each broken store fails its property, for every algorithm, with the
// seed and how to replay it in the report.
func TestPropertiesCatchBrokenStores(t *testing.T) {
	for _, c := range []struct{ how, prop string }{
		{"above", propRange},
		{"chargesOver", propOverCap},
		{"notNever", propOverCap},
		{"oneMore", propBound},
		{"retryShort", propRetry},
		{"retryLong", propRetry},
		{"forgets", propCarry},
	} {
		for _, alg := range propAlgorithms {
			msgs, _ := propRun(t, alg, 1, c.how)
			all := strings.Join(msgs, "\n")
			if !strings.Contains(all, "property "+c.prop+": seed=1 "+alg.String()) {
				t.Errorf("%s, %s: no failure of property %s reported:\n%s", c.how, alg, c.prop, all)
				continue
			}
			if !strings.Contains(all, seedEnv+"=1") {
				t.Errorf("%s, %s: the report does not say how to replay it:\n%s", c.how, alg, all)
			}
		}
	}
}

// retryShort's and retryLong's failures are the two halves of property 4:
// too short is caught by the take at retry-after, too long by the read
// before it.
func TestPropertiesRetryAfterBothWays(t *testing.T) {
	for _, alg := range propAlgorithms {
		short, _ := propRun(t, alg, 2, "retryShort")
		if all := strings.Join(short, "\n"); !strings.Contains(all, "retry-after is too short") {
			t.Errorf("%s: a retry-after 1µs short is not reported as too short:\n%s", alg, all)
		}
		long, _ := propRun(t, alg, 2, "retryLong")
		if all := strings.Join(long, "\n"); !strings.Contains(all, "retry-after is too long") {
			t.Errorf("%s: a retry-after I+1µs too long is not reported as too long:\n%s", alg, all)
		}
	}
}

// memstore passes every property , on
// several seeds, and the sequences exercise every property.
func TestPropertiesPassMemstore(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		for _, alg := range propAlgorithms {
			msgs, s := propRun(t, alg, seed, "")
			if len(msgs) != 0 {
				t.Errorf("seed %d, %s:\n%s", seed, alg, strings.Join(msgs, "\n"))
				continue
			}
			if s.sequences != propSequences || s.admitted == 0 || s.denied == 0 || s.overCap == 0 || s.retries == 0 || s.probes == 0 || s.changes == 0 {
				t.Errorf("seed %d, %s: a property is not exercised: %+v", seed, alg, s)
			}
		}
	}
}

// The seed comes from FLOODGATE_STORETEST_SEED when it is set, so a
// failure can be replayed.
func TestPropertiesSeedFromEnvironment(t *testing.T) {
	t.Setenv(seedEnv, "12345")
	if got := propSeed(t); got != 12345 {
		t.Fatalf("seed %d, want 12345 from %s", got, seedEnv)
	}
}

// One seed gives one sequence of takes: a replay sees the same steps.
func TestPropertiesReplay(t *testing.T) {
	trace := func() string {
		clk := clock.New(time.Time{})
		st := broken{mem(t, clk), "retryShort"}
		msgs := runRecorded(func(r reporter) {
			checkProperties(r, st, clk, "p:", propConfig{alg: quota.SlidingWindowCounter, seed: 99, sequences: 3, steps: propSteps})
		})
		return strings.Join(msgs, "\n")
	}
	first := trace()
	if first == "" {
		t.Fatal("no failure to compare")
	}
	if again := trace(); again != first {
		t.Fatalf("two runs of seed 99 differ:\n%s\n---\n%s", first, again)
	}
}
