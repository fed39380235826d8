package fallback

import (
	"math"
	"sync/atomic"
	"time"
)

// budget is the call budget of a take with no fail-closed bucket. It
// follows the primary's latency as TCP's retransmission timer follows a
// path's round trips (RFC 6298, section 2): from each sample R, the
// smoothed latency and its variation
//
//	rttvar = 3/4·rttvar + 1/4·|srtt − R|, then
//	srtt   = 7/8·srtt   + 1/8·R
//
// and the budget srtt + 4·rttvar, kept between the configured timeout
// (WithTimeout, the floor) and the closed budget (WithClosedTimeout, the
// ceiling). A store that answers in well under the floor keeps the
// floor; on a host so loaded that calls take longer, the budget grows
// with them, so that a call the store answers in its usual time is not
// decided locally; when the host is quiet again, the samples bring the
// budget back to the floor. The estimate starts at srtt = rttvar =
// floor/5 (a budget of the floor), so that no single sample moves it
// far. The samples are one in sampleEvery of the calls answered within
// their budget, and every late answer (how long a call that outlived its
// budget took: without them a latency above the budget would never be
// seen), counted as at most twice the budget the call had: a late answer
// does not tell a loaded host from a stalled store, and a stall's
// answers, all late by the stall's length, would otherwise leave the
// budget at its length; twice the budget lets it grow with a loaded
// host's latencies, doubling at most per round of late answers.
//
// The arithmetic is in whole microseconds, as the test's figures are.
type budget struct {
	floor, ceil int64 // nanoseconds
	// est packs srtt (high 32 bits) and rttvar (low 32), in
	// microseconds.
	est atomic.Uint64
	cur atomic.Int64 // the budget, nanoseconds
}

// sampleEvery is how many calls answered in time make one sample, on
// average: enough to follow a change within a few hundred calls, few
// enough that the estimate costs a busy store nothing measurable.
const sampleEvery = 8

func newBudget(floor, ceil time.Duration) *budget {
	b := &budget{floor: int64(floor), ceil: int64(max(floor, ceil))}
	prior := uint64(max(floor.Microseconds()/5, 1))
	b.est.Store(prior<<32 | prior)
	b.cur.Store(b.floor)
	return b
}

// get returns the budget now.
func (b *budget) get() time.Duration { return time.Duration(b.cur.Load()) }

// sample adds one observed latency to the estimate.
func (b *budget) sample(d time.Duration) {
	r := min(d.Microseconds(), math.MaxUint32>>3) // so 4·rttvar + srtt fits
	for {
		old := b.est.Load()
		srtt, rttvar := int64(old>>32), int64(old&math.MaxUint32)
		dev := srtt - r
		if dev < 0 {
			dev = -dev
		}
		rttvar = (3*rttvar + dev) / 4
		srtt = (7*srtt + r) / 8
		if b.est.CompareAndSwap(old, uint64(srtt)<<32|uint64(rttvar)) {
			b.cur.Store(min(max((srtt+4*rttvar)*int64(time.Microsecond), b.floor), b.ceil))
			return
		}
	}
}

// sampleLate adds the latency d of a call that outlived its budget had
// (the budget it was given), counted as at most twice that budget.
func (b *budget) sampleLate(d, had time.Duration) { b.sample(min(d, 2*had)) }
