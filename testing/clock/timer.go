package clock

import (
	"sort"
	"time"
)

// timer is a pending After: its channel receives the fake time once the
// clock reaches at.
type timer struct {
	at time.Time
	ch chan time.Time
}

// After returns a channel that receives the fake time once Advance or Set
// moves the clock to now+d or beyond (at once when d <= 0), as
// time.After does in real time: code that waits on a Clock with an After
// method (a tiers.Limiter's max_wait rules) waits on fake time. Timers
// fire in the order of their instants, ties in the order they were made.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	f.timers = append(f.timers, timer{at: f.now.Add(d), ch: ch})
	f.fire()
	return ch
}

// Timers returns how many channels made by After have not fired yet: a
// test moves the clock once the code under test is waiting.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// fire sends the fake time on every due timer; f.mu is held.
func (f *Fake) fire() {
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
	n := 0
	for _, t := range f.timers {
		if t.at.After(f.now) {
			f.timers[n] = t
			n++
			continue
		}
		t.ch <- f.now
	}
	clear(f.timers[n:])
	f.timers = f.timers[:n]
}
