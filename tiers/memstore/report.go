package memstore

import (
	"context"
	"hash/maphash"
	"math/bits"
	"time"

	"github.com/floodgate-go/floodgate/tiers"
)

var _ tiers.Reporter = (*Store)(nil)

// markKey names what a Reporter remembers: a key's reports from one
// instance.
type markKey struct {
	key      string
	instance uint64
}

// mark is the last report of a key from one instance: its Seq, the count
// acknowledged after it, its debt, and when it is forgotten (µs).
type mark struct {
	seq, count uint64
	owed       int64 // what it counted and could not charge
	expires    int64
}

// Report implements tiers.Reporter: each report counts what no earlier
// attempt of its instance counted (by the marks it remembers for
// tiers.ReportMarkTTL), and charges as many of those units as the bucket
// holds, by the arithmetic of a take of that many units (the floor of a
// token bucket's tokens, of a GCRA's remaining units); an absent bucket
// is full. Reports are decided one after another at one reading of the
// clock; each is atomic with the takes of its key. Bad input is refused
// with tiers.ValidateReports's error before anything is charged. ctx is
// not consulted.
func (s *Store) Report(_ context.Context, reports []tiers.Report, res []tiers.ReportResult) error {
	if err := tiers.ValidateReports(reports, res); err != nil {
		return err
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	now := s.clock.Now().UnixMicro()
	if s.marks == nil {
		s.marks = make(map[markKey]mark)
	}
	if now-s.marksSwept >= int64(tiers.ReportMarkTTL/time.Microsecond) {
		for k, m := range s.marks {
			if now >= m.expires {
				delete(s.marks, k)
			}
		}
		s.marksSwept = now
	}
	for i := range reports {
		r := &reports[i]
		mk := markKey{r.Bucket.Key, r.Instance}
		m, ok := s.marks[mk]
		ok = ok && now < m.expires
		apply, counted, count := countReport(r, m, ok)
		if !apply {
			_, remaining := s.chargeUpTo(&r.Bucket, 0, now)
			res[i] = tiers.ReportResult{Acked: count, Remaining: remaining}
			continue
		}
		charged, remaining := s.chargeUpTo(&r.Bucket, counted, now)
		s.marks[mk] = mark{seq: r.Seq, count: count, owed: counted - charged, expires: now + int64(tiers.ReportMarkTTL/time.Microsecond)}
		res[i] = tiers.ReportResult{Applied: true, Counted: counted, Charged: charged, Acked: count, Remaining: remaining}
	}
	return nil
}

// countReport is the arithmetic of a report's mark (report.lua has the
// same): given r and the mark m remembered for its key and instance (ok
// false: none), whether to apply r, how many units it counts, and the
// count to acknowledge. When m is one of the attempts whose reply r's
// instance never had (m.seq >= r.Since > 0), r does not count again what
// those attempts counted since r.Acked, and does count what m could not
// charge.
func countReport(r *tiers.Report, m mark, ok bool) (apply bool, counted int64, count uint64) {
	cost := uint64(r.Bucket.Cost)
	switch {
	case ok && r.Seq <= m.seq:
		return false, 0, m.count
	case ok && r.Since != 0 && m.seq >= r.Since && m.count > r.Acked:
		before := m.count - r.Acked
		if before >= cost {
			return true, m.owed, m.count
		}
		return true, int64(cost-before) + m.owed, r.Acked + cost
	case ok && r.Since != 0 && m.seq >= r.Since:
		return true, int64(cost) + m.owed, r.Acked + cost
	}
	return true, int64(cost), r.Acked + cost
}

// chargeUpTo charges b up to want units, as many as it holds at now, and
// returns the units charged and what the bucket has left.
func (s *Store) chargeUpTo(b *tiers.Bucket, want int64, now int64) (charged, remaining int64) {
	h := maphash.String(s.seed, b.Key) & hashMask
	shi, _ := bits.Mul64(h, uint64(len(s.shards)))
	sh := &s.shards[shi]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := pending{h: h, shard: uint32(shi), e: sh.t.get(h, b.Key)}
	p.fresh = p.e == nil || p.e.alg != b.Limit.Algorithm || now >= p.e.expires
	one := []tiers.Bucket{*b}
	one[0].Cost, one[0].MaxWait = want, 0
	decide(&p, &one[0], now)
	left := p.remNo
	// Not all of it: what the bucket holds (one unit less if GCRA's
	// rounding says so).
	for !p.allow && one[0].Cost > 0 {
		one[0].Cost = min(one[0].Cost-1, left)
		decide(&p, &one[0], now)
	}
	if one[0].Cost <= 0 {
		return 0, left
	}
	s.commit(&p, &one[0], one, now)
	return one[0].Cost, p.remCh
}
