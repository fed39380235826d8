package fallback

import (
	"testing"
	"time"
)

// TestBudgetFollowsLatency: the budget is srtt + 4·rttvar (RFC 6298) of
// the samples, kept between the floor and the ceiling, exactly.
func TestBudgetFollowsLatency(t *testing.T) {
	t.Parallel()
	b := newBudget(5*time.Millisecond, 250*time.Millisecond)
	if got := b.get(); got != 5*time.Millisecond {
		t.Fatalf("budget before any sample %s, want the floor 5ms", got)
	}
	steps := []struct {
		sample, want time.Duration
	}{
		// from srtt = rttvar = 1000µs: 1ms: rttvar 3·1000/4 = 750,
		// srtt 1000: 4000µs, below the floor
		{time.Millisecond, 5 * time.Millisecond},
		// 12ms: rttvar (3·750 + 11000)/4 = 3312, srtt (7·1000 + 12000)/8 = 2375: 15623µs
		{12 * time.Millisecond, 15623 * time.Microsecond},
		// 12ms: rttvar (3·3312 + 9625)/4 = 4890, srtt (7·2375 + 12000)/8 = 3578: 23138µs
		{12 * time.Millisecond, 23138 * time.Microsecond},
		// 1s: rttvar (3·4890 + 996422)/4 = 252773, srtt 128130: the ceiling
		{time.Second, 250 * time.Millisecond},
	}
	for i, st := range steps {
		b.sample(st.sample)
		if got := b.get(); got != st.want {
			t.Fatalf("after sample %d (%s): budget %s, want %s", i+1, st.sample, got, st.want)
		}
	}
	// A quiet store brings it back to the floor.
	for range 100 {
		b.sample(500 * time.Microsecond)
	}
	if got := b.get(); got != 5*time.Millisecond {
		t.Fatalf("after 100 samples of 0.5ms: budget %s, want the floor 5ms", got)
	}
}

// TestLateSampleIsCapped: a late answer counts as at most twice the
// budget its call had, so a stall's answers (late by the stall's length)
// move the budget no further than answers of twice the budget would.
func TestLateSampleIsCapped(t *testing.T) {
	t.Parallel()
	stalled := newBudget(5*time.Millisecond, 250*time.Millisecond)
	capped := newBudget(5*time.Millisecond, 250*time.Millisecond)
	for range 20 {
		stalled.sampleLate(300*time.Millisecond, 5*time.Millisecond)
		capped.sample(10 * time.Millisecond)
	}
	if s, c := stalled.get(), capped.get(); s != c {
		t.Fatalf("after 20 late answers of 300ms with a 5ms budget: %s; after 20 samples of 10ms: %s; want equal", s, c)
	}
}
