package clock

import (
	"sync"
	"time"
)

// Fake is a floodgate.Clock whose time only changes when Advance or Set is
// called. It is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []timer // pending After channels
}

// Epoch is the instant a New clock starts at unless told otherwise:
// 2026-01-01T00:00:00Z, on a whole second so window arithmetic is readable.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// New returns a Fake clock reading start, or Epoch if start is zero.
func New(start time.Time) *Fake {
	if start.IsZero() {
		start = Epoch
	}
	return &Fake{now: start}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock forward by d (backward if d is negative) and
// returns the new time.
func (f *Fake) Advance(d time.Duration) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.fire()
	return f.now
}

// Set moves the clock to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
	f.fire()
}
