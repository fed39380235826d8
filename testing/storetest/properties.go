package storetest

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// The size of the properties run, per Run call: for each algorithm,
// propSequences sequences of propSteps steps, each step one take (plus
// the reads and follow-ups some properties add). Each take is a round trip
// on Redis, and Run runs for about eight Redis configurations.
const (
	propSequences = 12
	propSteps     = 50

	// seedEnv replays a run: its value is the seed= of a failure.
	seedEnv = "FLOODGATE_STORETEST_SEED"
	// sequencesEnv sets the number of sequences per algorithm, for a
	// longer local run.
	sequencesEnv = "FLOODGATE_STORETEST_SEQUENCES"
)

var propAlgorithms = []quota.Algorithm{quota.TokenBucket, quota.GCRA, quota.SlidingWindowCounter, quota.SlidingWindowLog, quota.FixedWindow}

// propConfig is one algorithm's properties run.
type propConfig struct {
	alg       quota.Algorithm
	seed      uint64
	sequences int
	steps     int
}

// propStats counts what a run did.
type propStats struct {
	sequences, takes int
	// what the properties checked: admissions (3), denies within the
	// capacity, costs above it (2), follow-ups at retry-after and reads
	// before it (4), changes of limit checked exactly (5)
	admitted, denied, overCap, retries, probes, changes int
}

func (a *propStats) add(b propStats) {
	a.sequences += b.sequences
	a.takes += b.takes
	a.admitted += b.admitted
	a.denied += b.denied
	a.overCap += b.overCap
	a.retries += b.retries
	a.probes += b.probes
	a.changes += b.changes
}

// runProperties runs the properties of every algorithm, each on a fresh
// store, with one seed.
func runProperties(t *testing.T, fresh func(t *testing.T) (quota.Store, *clock.Fake, string)) {
	seed, sequences := propSeed(t), propSequences
	if v := os.Getenv(sequencesEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1_000_000 {
			t.Fatalf("%s=%q: want a number of sequences from 1 to 1000000", sequencesEnv, v)
		}
		sequences = n
	}
	var total propStats
	start := time.Now()
	for _, alg := range propAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			st, clk, prefix := fresh(t)
			s := checkProperties(t, st, clk, prefix, propConfig{alg: alg, seed: seed, sequences: sequences, steps: propSteps})
			total.add(s)
		})
	}
	t.Logf("properties: %d sequences of %d steps, %d takes, %v, seed=%d (replay with %s=%d); checked: %d admissions, %d denies, %d costs above the capacity, %d retry-after follow-ups (%d reads before), %d changes of limit",
		total.sequences, propSteps, total.takes, time.Since(start).Round(time.Millisecond), seed, seedEnv, seed,
		total.admitted, total.denied, total.overCap, total.retries, total.probes, total.changes)
}

// propSeed returns the seed of seedEnv, or a random one.
func propSeed(t *testing.T) uint64 {
	if v := os.Getenv(seedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a seed= of a failure (an unsigned integer)", seedEnv, v)
		}
		return s
	}
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand)
	return binary.LittleEndian.Uint64(b[:]) >> 1
}

// checkProperties runs cfg.sequences random sequences of cfg.alg on st,
// on the fake clock clk, with keys under prefix, and checks on every step
// the properties below. Each sequence has its own key and its own random
// generator (from cfg.seed and its number), and ends at its first failure,
// which is reported with the seed, the sequence and its steps so far.
//
//  1. Every Result has Limit == Capacity() and 0 <= Remaining <=
//     Capacity(); and is well formed: Wait and Granted 0, RetryAfter 0
//     when allowed and at least 1 µs when a cost within the capacity is
//     denied.
//  2. A cost above the capacity is denied with RetryAfter quota.Never
//     and charges nothing: the denied take's Remaining and a cost-0 read
//     after it equal a cost-0 read just before, at one instant.
//  3. The bound. Within a stretch (from the sequence's first step or a
//     change of limit to the next change) the units admitted (costs of
//     allowed takes) are counted, and every interval starting at an
//     admission of the stretch holds at most:
//     token bucket, [a, b]: B + floor(N(b-a)/P) (the bucket holds at most
//     B at a and refills N per P; so at most B+N-1 in [a, a+P));
//     GCRA, [a, b]: B + floor(N(b-a)/P + S/T), S its slack (the TAT
//     after k units admitted from a is at least a + kT, and the last
//     admission, at b, needs TAT - b <= BT + S; at most B+N-1 in [a, a+P)
//     too, as S/T <= N/(2P));
//     sliding window log, (b-P, b]: N;
//     fixed window and sliding window counter: N in an aligned window
//     [wP, (w+1)P) (w = floor(t/P), t in µs since the Unix epoch, as the
//     stores align them), 2N in any [a, a+P).
//     Units admitted before the stretch are not counted: whatever state
//     the stretch starts with leaves no more room than a new bucket of
//     the stretch's limit (at most B tokens, a TAT no earlier than now,
//     counts and logs at least 0), so the fresh bucket's bound holds for
//     the stretch's own admissions from its first step.
//  4. Retry-After is enough and not too long: after a deny of a cost c
//     within the capacity, with RetryAfter r (rounded up to whole µs),
//     and no other traffic on the key, a take of c at now+r is allowed;
//     and when r > I+1µs, with I = ceil(P/N) µs (one unit's refill
//     interval; for the window algorithms too), a cost-0 read at
//     now+r-I-1µs shows Remaining < c.
//  5. Consumption carries across a change of limit: at one instant, a
//     cost-0 read under the old limit (rem), then one under the new
//     (rem2), on the same key, give rem2 == max(0, rem + cap' - cap),
//     cap = Capacity(). Changes: token bucket and GCRA, rate, period and
//     burst; sliding window counter, the rate; sliding window log, the
//     rate and the period (a shorter period forgets units older than the
//     new window: there rem2 >= max(0, rem + cap' - cap)); fixed window,
//     the rate and the period (the old window that holds now carries into
//     the new one that holds now); see nextLimit. When an earlier
//     change left more consumed than the capacity (rem + cap' - cap < 0)
//     and no Result has shown room since, rem understates the
//     consumption: then only rem2 <= max(0, rem + cap' - cap) is checked.
//
// Exactness. Times are whole milliseconds since clock.Epoch (steps of 0,
// shorter and longer than the period), except property 4's follow-ups at
// now+r and now+r-I-1µs, at any µs. Every assertion is exact, so the
// limits are drawn where the stores' doubles give the rational
// arithmetic's floors:
//
//   - token bucket: periods of whole powers of two µs (binaryPeriods:
//     65.536 ms to 71.6 min), so e·N/P is exact in a double for any e µs,
//     and so are the tokens, their floor, floor(tokens + cap' - cap) and
//     retry-after; odd-numbered sequences change their limit on them,
//     even-numbered ones make follow-ups on decimal periods (see run);
//   - GCRA: even-numbered sequences make follow-ups on any period and
//     never change their limit; odd-numbered ones change it and make no
//     follow-ups, on periods of 1.024, 2.048 and 4.096 s and rates up to
//     200, all steps whole ms: the consumption (TAT - now)/T is then a
//     multiple of 1/4096 (up to the doubles' error, far below it), and the
//     slack S/T = N/(2P) <= 200/2048000 < 1/4096 cannot move its floor, so
//     remaining = B - ceil(consumption) under every limit of the sequence.
//     (Periods of whole seconds with N <= 1000 would do for one period,
//     whose grid is 1/1000 and slack at most 1/2000; but a change of
//     period makes the grid 1/lcm of the periods in ms, which such a
//     slack can cross, and a follow-up at a µs time makes it 1/P µs.)
//   - window algorithms: whole units (the sliding counter's weighted sum
//     is a multiple of 1/P, never within a double's error of an integer it
//     is not equal to), so every sequence makes both.
func checkProperties(r reporter, st quota.Store, clk *clock.Fake, prefix string, cfg propConfig) propStats {
	r.Helper()
	var stats propStats
	now := clock.Epoch.UnixMicro()
	failures := 0
	for i := range cfg.sequences {
		s := &propSeq{
			r: r, st: st, clk: clk, cfg: cfg, seq: i,
			key: fmt.Sprintf("%sp%d", prefix, i),
			g:   rand.New(rand.NewPCG(cfg.seed, uint64(cfg.alg)<<32|uint64(i))),
		}
		// GCRA alternates: follow-ups on any period, or changes on the
		// grid (see Exactness above); so does the token bucket, whose
		// even-numbered sequences draw decimal periods (50 ms, 1 s, 7 s,
		// 1 min, 1 h) with follow-ups and no changes: in doubles its
		// retry-after, ceil((c - tokens)·P/N), can fall 1 µs short (1/100ms
		// burst 2, a new bucket: takes of 2 at 0 and of 1 at 113 ms leave
		// 0.12999999999999989 tokens; a take of 1 at 117 ms is denied with
		// 83 ms, and at 200 ms a read finds 0.99999999999999989 tokens),
		// which the stores make up with one µs more (quota.Algorithm).
		alternate := cfg.alg == quota.GCRA || cfg.alg == quota.TokenBucket
		s.retries = !alternate || i%2 == 0
		s.changes = !alternate || i%2 == 1
		s.lim = s.firstLimit()
		// Each sequence starts after the last one, at a random offset
		// within its period (so windows are met at every phase).
		s.now = now + 1000*(1+s.g.Int64N(msOf(s.lim.Period)))
		ok := s.run()
		now = s.now
		s.stats.sequences++
		stats.add(s.stats)
		if !ok {
			if failures++; failures == 3 {
				r.Errorf("%s: stopping after %d failed sequences (seed=%d)", cfg.alg, failures, cfg.seed)
				break
			}
		}
	}
	return stats
}

// propSeq is one sequence: one key, its limit, and what the properties
// need to remember of it.
type propSeq struct {
	r       reporter
	st      quota.Store
	clk     *clock.Fake
	cfg     propConfig
	seq     int
	key     string
	g       *rand.Rand
	retries bool // property 4's follow-ups
	changes bool // property 5's changes of limit

	lim   quota.Limit
	now   int64 // µs since the Unix epoch
	step  int
	stats propStats
	// admitted: the stretch's admissions (property 3).
	admitted []admission
	// owes: the state may hold more than the capacity, unseen (rem 0).
	owes  bool
	trace []string
}

type admission struct{ at, cost int64 }

// The limits sequences draw from; see checkProperties on exactness.
var (
	// binaryPeriods, whole powers of two µs, make every token bucket
	// quantity exact in doubles: e·N/P for any e µs, so tokens, floor and
	// retry-after are the rational arithmetic's.
	binaryPeriods = []time.Duration{1 << 16 * time.Microsecond, 1 << 20 * time.Microsecond, 1 << 22 * time.Microsecond, 1 << 26 * time.Microsecond, 1 << 32 * time.Microsecond}
	gridPeriods   = []time.Duration{1024 * time.Millisecond, 2048 * time.Millisecond, 4096 * time.Millisecond}
	gridRates     = []int64{1, 2, 3, 5, 8, 10, 16, 25, 50, 100, 200}
	freePeriods   = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, time.Second, 1500 * time.Millisecond, 7 * time.Second, time.Minute, time.Hour}
	freeRates     = []int64{1, 2, 3, 5, 7, 10, 30, 100, 1000}
	windowPeriods = []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second, 1500 * time.Millisecond, 7 * time.Second, time.Minute, time.Hour}
	windowRates   = []int64{1, 2, 3, 4, 5, 8, 10, 20}
	propBursts    = []int64{1, 2, 3, 4, 5, 8, 10, 20}
)

func pick[T any](g *rand.Rand, xs []T) T { return xs[g.IntN(len(xs))] }

func msOf(d time.Duration) int64 { return int64(d / time.Millisecond) }

func µsOf(d time.Duration) int64 { return int64(d / time.Microsecond) }

// ceilDiv is ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// floorDivI is floor(a/b) for b > 0.
func floorDivI(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func (s *propSeq) bucketAlg() bool {
	return s.cfg.alg == quota.TokenBucket || s.cfg.alg == quota.GCRA
}

func (s *propSeq) firstLimit() quota.Limit {
	l := quota.Limit{Algorithm: s.cfg.alg}
	switch {
	case !s.bucketAlg():
		l.Period, l.Rate = pick(s.g, windowPeriods), pick(s.g, windowRates)
	case s.cfg.alg == quota.TokenBucket && s.changes:
		l.Period, l.Rate, l.Burst = pick(s.g, binaryPeriods), pick(s.g, freeRates), pick(s.g, propBursts)
	case s.changes:
		l.Period, l.Rate, l.Burst = pick(s.g, gridPeriods), pick(s.g, gridRates), pick(s.g, propBursts)
	default:
		l.Period, l.Rate, l.Burst = pick(s.g, freePeriods), pick(s.g, freeRates), pick(s.g, propBursts)
	}
	return l
}

// nextLimit returns a limit different from s.lim, changed in every way
// the algorithm's promise covers (quota.Algorithm, "Limit changes"): a
// token bucket's rate, period and burst; GCRA's rate, period and burst; a
// sliding window counter's rate (its period's change is capped, not
// exact, and checked by the differential test in tiers/redisstore); a
// log's and a fixed window's rate and period.
func (s *propSeq) nextLimit() quota.Limit {
	old := s.lim
	for range 20 {
		l := old
		switch s.cfg.alg {
		case quota.TokenBucket:
			if s.g.IntN(2) == 0 {
				l.Rate = pick(s.g, freeRates)
			}
			if s.g.IntN(2) == 0 {
				l.Period = pick(s.g, binaryPeriods)
			}
			if s.g.IntN(2) == 0 {
				l.Burst = pick(s.g, propBursts)
			}
		case quota.GCRA:
			if s.g.IntN(2) == 0 {
				l.Rate = pick(s.g, gridRates)
			}
			if s.g.IntN(2) == 0 {
				l.Period = pick(s.g, gridPeriods)
			}
			if s.g.IntN(2) == 0 {
				l.Burst = pick(s.g, propBursts)
			}
		case quota.SlidingWindowCounter:
			l.Rate = pick(s.g, windowRates)
		case quota.SlidingWindowLog, quota.FixedWindow:
			if s.g.IntN(3) != 0 {
				l.Rate = pick(s.g, windowRates)
			}
			if s.g.IntN(2) == 0 {
				l.Period = pick(s.g, windowPeriods)
			}
		}
		if l != old {
			return l
		}
	}
	// Twenty draws gave the same limit (a small set): change the rate by
	// one.
	l := old
	l.Rate = old.Rate%20 + 1
	return l
}

// cost draws a cost from 0 to capacity+2, mostly small.
func (s *propSeq) cost() int64 {
	c := s.lim.Capacity()
	switch x := s.g.IntN(20); {
	case x < 2:
		return 0
	case x < 15:
		return 1 + s.g.Int64N(min(3, c))
	case x < 19:
		return 1 + s.g.Int64N(c)
	default:
		return c + 1 + s.g.Int64N(2)
	}
}

// refillInterval is I = ceil(P/N) in µs: the time one unit takes to
// come back.
func refillInterval(l quota.Limit) int64 { return ceilDiv(µsOf(l.Period), l.Rate) }

// advance draws a step, in whole ms: 0, around one refill interval,
// within half a period, or longer than a period.
func (s *propSeq) advance() {
	p := msOf(s.lim.Period)
	i := max(1, ceilDiv(refillInterval(s.lim), 1000))
	var d int64
	switch x := s.g.IntN(20); {
	case x < 4:
	case x < 14:
		d = 1 + s.g.Int64N(2*i)
	case x < 18:
		d = 1 + s.g.Int64N(max(1, p/2))
	default:
		d = p + s.g.Int64N(p+1)
	}
	s.now += 1000 * d
}

func fmtLimit(l quota.Limit) string {
	if l.Algorithm == quota.TokenBucket || l.Algorithm == quota.GCRA {
		return fmt.Sprintf("%s %d/%v burst %d", l.Algorithm, l.Rate, l.Period, l.Burst)
	}
	return fmt.Sprintf("%s %d/%v", l.Algorithm, l.Rate, l.Period)
}

// at is now as an offset from clock.Epoch, for messages.
func (s *propSeq) at(now int64) time.Duration {
	return time.Duration(now-clock.Epoch.UnixMicro()) * time.Microsecond
}

// fail reports a failed property with what replays it, and returns false.
func (s *propSeq) fail(prop, format string, args ...any) bool {
	s.r.Helper()
	tr := s.trace
	if len(tr) > 60 {
		tr = append([]string{fmt.Sprintf("(%d earlier lines)", len(tr)-60)}, tr[len(tr)-60:]...)
	}
	s.r.Errorf("property %s: seed=%d %s sequence %d, step %d at +%v, key %q, limit %s: %s\n(replay with %s=%d)\nsequence so far:\n  %s",
		prop, s.cfg.seed, s.cfg.alg, s.seq, s.step, s.at(s.now), s.key, fmtLimit(s.lim), fmt.Sprintf(format, args...),
		seedEnv, s.cfg.seed, strings.Join(tr, "\n  "))
	return false
}

// Property names, as failures name them.
const (
	propRange    = "1 (remaining within the capacity)"
	propOverCap  = "2 (a cost above the capacity)"
	propBound    = "3 (the bound)"
	propRetry    = "4 (retry-after)"
	propCarry    = "5 (consumption carries across a change of limit)"
	propWellForm = "1 (a well-formed result)"
)

// take takes cost from the sequence's key at now, checks property 1 on
// the result, and returns it; ok is false after a failure.
func (s *propSeq) take(now, cost int64, what string) (res quota.Result, ok bool) {
	s.r.Helper()
	s.clk.Set(time.UnixMicro(now))
	var out [1]quota.Result
	allowed, err := s.st.Take(context.Background(), []quota.Bucket{{Key: s.key, Limit: s.lim, Cost: cost}}, out[:])
	s.stats.takes++
	res = normSource(out[0])
	s.trace = append(s.trace, fmt.Sprintf("+%v %s cost %d under %s: %s", s.at(now), what, cost, fmtLimit(s.lim), fmtResult(res)))
	if err != nil {
		s.r.Fatalf("seed=%d %s sequence %d: Take(%q, cost %d) at +%v: %v", s.cfg.seed, s.cfg.alg, s.seq, s.key, cost, s.at(now), err)
	}
	if allowed != res.Allowed {
		return res, s.fail(propWellForm, "Take returned allowed=%v, its only result says %v", allowed, res.Allowed)
	}
	capacity := s.lim.Capacity()
	if res.Limit != capacity || res.Remaining < 0 || res.Remaining > capacity {
		return res, s.fail(propRange, "%s: limit %d, remaining %d; want limit %d and remaining in [0, %d]", what, res.Limit, res.Remaining, capacity, capacity)
	}
	switch {
	case res.Wait != 0 || res.Granted != 0 || res.Source != "":
		return res, s.fail(propWellForm, "%s: %s, want wait 0, granted 0 and the store as source", what, fmtResult(res))
	case res.Allowed && res.RetryAfter != 0:
		return res, s.fail(propWellForm, "%s: allowed with retry-after %v, want 0", what, res.RetryAfter)
	case !res.Allowed && cost <= capacity && res.RetryAfter < time.Microsecond:
		return res, s.fail(propWellForm, "%s: cost %d within the capacity %d denied with retry-after %v, want at least 1µs", what, cost, capacity, res.RetryAfter)
	}
	if res.Remaining > 0 || (res.Allowed && cost > 0) {
		s.owes = false
	}
	return res, true
}

// run runs the sequence; false after a failure.
func (s *propSeq) run() bool {
	s.trace = append(s.trace, fmt.Sprintf("sequence %d of %s, key %q, starts at +%v under %s", s.seq, s.cfg.alg, s.key, s.at(s.now), fmtLimit(s.lim)))
	for s.step = range s.cfg.steps {
		if s.step > 0 {
			s.advance()
			if s.changes && s.g.IntN(15) == 0 {
				if !s.change(s.nextLimit()) {
					return false
				}
			}
		}
		cost := s.cost()
		if cost > s.lim.Capacity() {
			if !s.overCapacity(cost) {
				return false
			}
			continue
		}
		res, ok := s.take(s.now, cost, "take")
		if !ok {
			return false
		}
		if !res.Allowed {
			s.stats.denied++
		}
		if res.Allowed && cost > 0 {
			if !s.admit(s.now, cost) {
				return false
			}
		}
		if !res.Allowed && cost > 0 && s.retries && s.g.IntN(2) == 0 {
			if !s.retry(cost, res.RetryAfter) {
				return false
			}
		}
	}
	return true
}

// overCapacity checks property 2 at now.
func (s *propSeq) overCapacity(cost int64) bool {
	before, ok := s.take(s.now, 0, "read before a cost above the capacity")
	if !ok {
		return false
	}
	res, ok := s.take(s.now, cost, "take above the capacity")
	if !ok {
		return false
	}
	after, ok := s.take(s.now, 0, "read after a cost above the capacity")
	if !ok {
		return false
	}
	s.stats.overCap++
	switch {
	case res.Allowed || res.RetryAfter != quota.Never:
		return s.fail(propOverCap, "cost %d above the capacity %d: allowed=%v retry-after %v, want denied with quota.Never", cost, s.lim.Capacity(), res.Allowed, res.RetryAfter)
	case res.Remaining != before.Remaining || after.Remaining != before.Remaining:
		return s.fail(propOverCap, "cost %d above the capacity %d charged: remaining %d before, %d in its result, %d after", cost, s.lim.Capacity(), before.Remaining, res.Remaining, after.Remaining)
	}
	return true
}

// retry checks property 4 after a deny of cost with retry-after ra at
// s.now, and moves s.now to the follow-up take.
func (s *propSeq) retry(cost int64, ra time.Duration) bool {
	r := ceilDiv(int64(ra), int64(time.Microsecond))
	if i := refillInterval(s.lim); r > i+1 {
		probe, ok := s.take(s.now+r-i-1, 0, fmt.Sprintf("read at retry-after %v - I %v - 1µs", ra, time.Duration(i)*time.Microsecond))
		if !ok {
			return false
		}
		s.stats.probes++
		if probe.Remaining >= cost {
			return s.fail(propRetry, "a deny of cost %d with retry-after %v, but at %v before it (a refill interval I = %v and 1µs) remaining is already %d: retry-after is too long",
				cost, ra, time.Duration(i+1)*time.Microsecond, time.Duration(i)*time.Microsecond, probe.Remaining)
		}
	}
	s.now += r
	res, ok := s.take(s.now, cost, "take at retry-after")
	if !ok {
		return false
	}
	s.stats.retries++
	if !res.Allowed {
		return s.fail(propRetry, "a deny of cost %d with retry-after %v, and a take of %d at that time, with no other traffic, is denied again: retry-after is too short", cost, ra, cost)
	}
	return s.admit(s.now, cost)
}

// change checks property 5: a read under the old limit and one under l at
// one instant; the sequence then goes on under l, a new stretch.
func (s *propSeq) change(l quota.Limit) bool {
	owed := s.owes
	before, ok := s.take(s.now, 0, "read before a change of limit")
	if !ok {
		return false
	}
	old := s.lim
	s.lim, s.admitted = l, nil
	after, ok := s.take(s.now, 0, "read after a change of limit")
	if !ok {
		return false
	}
	rem, rem2 := before.Remaining, after.Remaining
	d := l.Capacity() - old.Capacity()
	want := max(0, rem+d)
	known := !owed || rem > 0 // rem is the consumption, not an understatement
	shorter := l.Algorithm == quota.SlidingWindowLog && l.Period < old.Period
	desc := fmt.Sprintf("from %s (remaining %d) to %s", fmtLimit(old), rem, fmtLimit(l))
	switch {
	case shorter && known && rem2 < want:
		return s.fail(propCarry, "%s: remaining %d, want at least %d (a shorter log forgets only units older than its window)", desc, rem2, want)
	case !shorter && known && rem2 != want:
		return s.fail(propCarry, "%s: remaining %d, want max(0, %d + %d - %d) = %d", desc, rem2, rem, l.Capacity(), old.Capacity(), want)
	case !shorter && !known && rem2 > want:
		return s.fail(propCarry, "%s (a change before left more consumed than the capacity): remaining %d, want at most %d", desc, rem2, want)
	}
	if known && !shorter {
		s.stats.changes++
		s.owes = rem+d < 0
	} else {
		s.owes = rem2 == 0
	}
	return true
}

// admit records cost units admitted at now in the stretch and checks
// property 3 on every interval ending at now.
func (s *propSeq) admit(now, cost int64) bool {
	s.stats.admitted++
	s.admitted = append(s.admitted, admission{now, cost})
	l := s.lim
	N, B, P := l.Rate, l.Burst, µsOf(l.Period)
	var sum int64
	for j := len(s.admitted) - 1; j >= 0; j-- {
		a := s.admitted[j]
		sum += a.cost
		span := now - a.at
		switch l.Algorithm {
		case quota.TokenBucket:
			if bound := B + N*span/P; sum > bound {
				return s.failBound(j, sum, bound, fmt.Sprintf("[+%v, +%v]: B + floor(N·%v/P)", s.at(a.at), s.at(now), time.Duration(span)*time.Microsecond))
			}
		case quota.GCRA:
			// S/T = min(0.5, T/2)/T = min(N, P)/(2P)
			if bound := B + (2*N*span+min(N, P))/(2*P); sum > bound {
				return s.failBound(j, sum, bound, fmt.Sprintf("[+%v, +%v]: B + floor(N·%v/P + S/T)", s.at(a.at), s.at(now), time.Duration(span)*time.Microsecond))
			}
		case quota.SlidingWindowLog:
			if span < P && sum > N {
				return s.failBound(j, sum, N, fmt.Sprintf("(+%v, +%v]: N", s.at(now-P), s.at(now)))
			}
		default: // fixed window, sliding window counter
			if span < P && sum > 2*N {
				return s.failBound(j, sum, 2*N, fmt.Sprintf("[+%v, +%v], shorter than P: 2N", s.at(a.at), s.at(now)))
			}
			if w := floorDivI(now, P); floorDivI(a.at, P) == w && sum > N {
				return s.failBound(j, sum, N, fmt.Sprintf("the aligned window [+%v, +%v): N", s.at(w*P), s.at((w+1)*P)))
			}
		}
	}
	return true
}

func (s *propSeq) failBound(from int, sum, bound int64, interval string) bool {
	var list []string
	for _, a := range s.admitted[from:] {
		list = append(list, fmt.Sprintf("%d at +%v", a.cost, s.at(a.at)))
	}
	return s.fail(propBound, "%d units admitted in %s = %d (admissions: %s)", sum, interval, bound, strings.Join(list, ", "))
}
