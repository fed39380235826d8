package harness

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistogramExactBelow256ns(t *testing.T) {
	var h Histogram
	for v := 1; v <= 200; v++ {
		h.Record(time.Duration(v))
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 100}, {0.99, 198}, {1, 200}, {0.001, 1}} {
		if got := h.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %d, want %d", tc.q, got, tc.want)
		}
	}
	if h.Count() != 200 || h.Max() != 200 || h.Mean() != 100 {
		t.Errorf("count/max/mean = %d/%d/%d, want 200/200/100", h.Count(), h.Max(), h.Mean())
	}
}

func TestHistogramPrecisionMatchesSortedSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 100_000
	samples := make([]time.Duration, n)
	var a, b Histogram
	for i := range samples {
		// Log-uniform from 1µs to ~1s.
		v := time.Duration(1000*(1<<rng.IntN(20))) + time.Duration(rng.IntN(1000*(1<<rng.IntN(20))+1))
		samples[i] = v
		if i%2 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	a.Merge(&b)
	slices.Sort(samples)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999} {
		exact := samples[int(q*n)-1]
		got := a.Quantile(q)
		if diff := float64(got-exact) / float64(exact); diff > 1.0/subCount || diff < -1.0/subCount {
			t.Errorf("Quantile(%v) = %s, exact %s: off by %.3f%% (bound %.3f%%)", q, got, exact, 100*diff, 100.0/subCount)
		}
	}
	if a.Max() != samples[n-1] || a.Count() != n {
		t.Errorf("max %s count %d, want %s %d", a.Max(), a.Count(), samples[n-1], n)
	}
}

func TestBucketBoundsCoverEveryValue(t *testing.T) {
	for _, v := range []uint64{0, 1, 255, 256, 257, 511, 512, 1 << 20, 1<<20 + 12345, 1<<63 - 1, 1<<64 - 1} {
		i := bucketOf(v)
		if i < 0 || i >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d, outside [0, %d)", v, i, numBuckets)
		}
		lo, hi := bucketBounds(i)
		if v < lo || v > hi {
			t.Errorf("value %d in bucket %d with bounds [%d, %d]", v, i, lo, hi)
		}
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	h := &Histogram{}
	if n := testing.AllocsPerRun(1000, func() { h.Record(1234567) }); n != 0 {
		t.Errorf("Record allocates %v times", n)
	}
}

func TestLoadValidate(t *testing.T) {
	ok := Load{Concurrency: 4, Keys: 10, Duration: time.Second, MaxOps: 100}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid load rejected: %v", err)
	}
	for name, l := range map[string]Load{
		"concurrency": {Concurrency: 0, Keys: 10, Duration: time.Second, MaxOps: 100},
		"keys":        {Concurrency: 4, Keys: 0, Duration: time.Second, MaxOps: 100},
		"duration":    {Concurrency: 4, Keys: 10, Duration: 0, MaxOps: 100},
		"max ops":     {Concurrency: 4, Keys: 10, Duration: time.Second, MaxOps: 3},
	} {
		if err := l.Validate(); err == nil {
			t.Errorf("%s: invalid load accepted: %+v", name, l)
		}
	}
}
