package localfirst

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// counters back Stats.
type counters struct {
	localAllowed, localDenied, storeAllowed atomic.Uint64
	leases, leasedUnits, returnedUnits      atomic.Uint64
	reports, reportedUnits, reportFailures  atomic.Uint64
	debtUnits, returnFailures, overflow     atomic.Uint64
	syncs, lastBatch                        atomic.Uint64
	lagMax                                  atomic.Int64
}

// Stats is a snapshot of a Store's counters.
type Stats struct {
	// LocalAllowed and LocalDenied count takes decided without the store;
	// StoreAllowed counts takes the exact store allowed (exact levels,
	// leases taken with a request, cold async keys).
	LocalAllowed, LocalDenied, StoreAllowed uint64
	// Leases counts leases granted and LeasedUnits their extra units;
	// ReturnedUnits counts unspent units given back.
	Leases, LeasedUnits, ReturnedUnits uint64
	// Reports counts async reports that reached the store, ReportedUnits
	// their units, ReportFailures those that did not (their units are
	// kept and sent again); DebtUnits counts units admitted here that the
	// store had no room for when reported.
	Reports, ReportedUnits, ReportFailures, DebtUnits uint64
	// ReturnFailures counts lease returns that failed (retried).
	ReturnFailures uint64
	// Overflow counts local buckets decided by the exact store because
	// the key bound was reached.
	Overflow uint64
	// Syncs counts Sync runs; LastBatch is how many reports and returns
	// the last one sent; MaxSyncLag is the longest a report waited past
	// the moment it fell due (its interval after the last report ran
	// out, or a hit found it run out: never the time a key sat idle).
	Syncs, LastBatch uint64
	MaxSyncLag       time.Duration
	// Keys is the number of keys held locally.
	Keys int
}

// Stats returns a snapshot of the Store's counters.
func (s *Store) Stats() Stats {
	keys := int(s.nkeys.Load())
	c := &s.st
	return Stats{
		LocalAllowed: c.localAllowed.Load(), LocalDenied: c.localDenied.Load(), StoreAllowed: c.storeAllowed.Load(),
		Leases: c.leases.Load(), LeasedUnits: c.leasedUnits.Load(), ReturnedUnits: c.returnedUnits.Load(),
		Reports: c.reports.Load(), ReportedUnits: c.reportedUnits.Load(), ReportFailures: c.reportFailures.Load(),
		DebtUnits: c.debtUnits.Load(), ReturnFailures: c.returnFailures.Load(), Overflow: c.overflow.Load(),
		Syncs: c.syncs.Load(), LastBatch: c.lastBatch.Load(), MaxSyncLag: time.Duration(c.lagMax.Load()),
		Keys: keys,
	}
}

// tick is how often the background goroutine runs Sync.
const tick = 10 * time.Millisecond

// idleFor is how long an idle key is kept.
const idleFor = 30 * time.Second

func (s *Store) loop() {
	defer close(s.stopped)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sync(context.Background(), syncDue)
		}
	}
}

// Sync reports the async keys that are due and gives back expired leases,
// now; the background goroutine calls it every few milliseconds.
func (s *Store) Sync(ctx context.Context) error { return s.sync(ctx, syncDue) }

// Flush reports every unreported hit now, whatever its key's cadence, and
// gives back expired leases; leases in force are kept. Afterwards the
// ledger holds every hit admitted before the call (those whose report
// failed excepted: they stay pending and go again, as with Sync). It
// brings the ledger up to date at a point in time, for a measurement or
// before a planned hand-over, without stopping the Store.
func (s *Store) Flush(ctx context.Context) error { return s.sync(ctx, syncHits) }

// syncMode is what a sync sends.
type syncMode int

const (
	syncDue  syncMode = iota // the reports due and the expired leases (Sync)
	syncHits                 // every unreported hit and the expired leases (Flush)
	syncAll                  // every unreported hit and every leased unit (Close)
)

// Close stops the background goroutine, reports every unreported hit and
// gives back every leased unit. The Store must not be used after. It
// closes neither the exact store nor the ledger, which the caller owns:
// an exact store with a hand-over of its own (a fallback.Store, which
// owes the units it admitted locally) is closed after this Store, with
// its own Close.
func (s *Store) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	<-s.stopped
	return s.sync(ctx, syncAll)
}

// job is one report to send: an async key's hits (Cost > 0) or a leased
// key's unspent units going back (Cost < 0).
type job struct {
	e *entry
	b quota.Bucket // Cost: the units, negative for a return
}

// attempt is a report call whose reply never came: it may or may not
// have been applied, which the ledger's Resolve tells. Its keys stay in
// flight (no new report) until it is resolved.
type attempt struct {
	seq  uint64
	jobs []job
}

// maxGroup bounds the keys of one report call.
const maxGroup = 64

// maxKeptJobs bounds the jobs buffer a Store keeps between syncs (about
// 3 MB).
const maxKeptJobs = 16384

// maxParallel bounds the ledger calls one Sync has in flight.
const maxParallel = 16

func (s *Store) sync(ctx context.Context, mode syncMode) error {
	// One sync at a time: a sync takes the pending list while it runs,
	// and a Flush must see every key, not the part another left it.
	s.smu.Lock()
	defer s.smu.Unlock()
	// Calls whose reply never came first: their keys report again once
	// the ledger says what they charged.
	lostErr := s.resolveLost(ctx)
	now := s.cfg.clock.Now()
	// The jobs' buffer is the last sync's: a job holds a whole Bucket, and
	// a busy store reports thousands of keys a second.
	jobs := s.jobs[:0]
	nret := 0
	nowNs := now.UnixNano()
	s.pmu.Lock()
	taken := s.wheel.take(tickOf(nowNs), mode != syncDue, s.taken[:0])
	s.pmu.Unlock()
	keep := taken[:0]
	for _, e := range taken {
		if mode == syncDue && nowNs < e.wake.Load() {
			keep = append(keep, e) // filed early (a tick's start, the wheel's end): not yet due
			continue
		}
		e.mu.Lock()
		if e.units > 0 && (mode == syncAll || !now.Before(e.expires)) {
			e.owed += e.units
			e.units = 0
		}
		switch {
		case e.owed > 0 && e.returning == 0:
			// Unspent lease units go back (a key whose consistency
			// changed reports its hits at the next Sync: one call names
			// a key once).
			b := e.bucket()
			b.Cost = -e.owed
			e.returning, e.owed = e.owed, 0
			jobs = append(jobs, job{e: e, b: b})
			nret++
		case e.inflight == 0 && e.returning == 0:
			if cost, lag, due := e.due(now, mode != syncDue); due {
				// A report is at most the capacity: the rest goes next
				// time (after an outage, a key may owe more).
				cost = min(cost, e.capacity())
				b := e.bucket()
				b.Cost = cost
				e.u -= cost
				e.inflight = cost
				e.lastReport = now
				e.dueAt = 0
				jobs = append(jobs, job{e: e, b: b})
				if lag > time.Duration(s.st.lagMax.Load()) {
					s.st.lagMax.Store(int64(lag))
				}
			}
		}
		// An entry stays pending while it holds or owes anything;
		// reports and returns under way count (they may fail).
		if e.units > 0 || e.owed > 0 || e.u > 0 || e.inflight > 0 || e.returning > 0 {
			keep = append(keep, e)
			e.wake.Store(e.nextWake())
		} else {
			e.queued = false
		}
		e.mu.Unlock()
	}
	// The entries kept go back on the wheel by their wake now (a take
	// may have moved it earlier since), before their reports are sent:
	// a report's reply files its key again.
	if len(keep) > 0 {
		s.pmu.Lock()
		for _, e := range keep {
			s.wheel.place(e)
		}
		s.pmu.Unlock()
	}
	s.taken = drain(taken)
	s.sweep(now)
	s.st.syncs.Add(1)
	s.st.lastBatch.Store(uint64(len(jobs)))

	errs := []error{lostErr}
	if len(jobs) > 0 {
		errs = append(errs, s.sendReports(ctx, jobs)...)
	}
	// sendReports has waited for its calls, and what they keep (lost
	// attempts) they copied: the buffer is free again, its keys dropped,
	// unless a flush of every key made it larger than a busy tick needs.
	clear(jobs)
	s.jobs = nil
	if cap(jobs) <= maxKeptJobs {
		s.jobs = jobs[:0]
	}
	err := errors.Join(errs...)
	if err != nil {
		s.logFailure(err)
	}
	return err
}

// sendReports sends jobs to the ledger, maxGroup keys to a call, at most
// maxParallel calls at a time, and returns the calls' errors. A report
// never denies (it charges what the store has and returns the rest as
// debt), so every key due goes at once; one call for every key a Close
// gives back would outlast the sync timeout (10 000 leased keys did).
func (s *Store) sendReports(ctx context.Context, jobs []job) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, maxParallel)
	for len(jobs) > 0 {
		k := min(len(jobs), maxGroup)
		t := jobs[:k:k]
		jobs = jobs[k:]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := s.report(ctx, t); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}

// sweep drops keys idle for idleFor, at most once per idleFor/4.
func (s *Store) sweep(now time.Time) {
	last := s.lastSweep.Load()
	if last != 0 && now.UnixNano()-last < int64(idleFor/4) {
		return
	}
	s.lastSweep.Store(now.UnixNano())
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.entries {
			if now.Sub(e.touched) <= idleFor {
				continue
			}
			e.mu.Lock()
			if e.idle() && !e.queued {
				e.dropped = true
				delete(sh.entries, k)
				s.nkeys.Add(-1)
			}
			e.mu.Unlock()
		}
		sh.mu.Unlock()
	}
}

// maxReportWait bounds how long a key with unreported hits goes without a
// report, however far below its share it is (or one sync interval, if
// longer). What it holds unreported is below half its share whatever the
// wait (see due), so the wait bounds staleness, not over-admission; it is
// well below idleFor, so such a key is reported before it could be swept.
const maxReportWait = 10 * time.Second

// due says whether e's hits should be reported now, how many, and how
// late. The cadence follows the key's headroom: a key that has spent half
// its share (or more) since its last report is reported every quarter
// interval; below that, a key is due once
//
//	time since its last report × unreported ≥ interval × share / 2
//
// so one at a quarter of its share waits 2 intervals, one at 1/16 waits 8,
// and a key touched now and then at most maxReportWait (10s). Redis work then
// follows the keys near their limits, not the number of keys touched; and
// what any instance holds unreported stays below half its share plus a
// quarter interval of its refill, which keeps the async bound. A negative
// count (a reservation cancelled after its units were reported) is a
// credit: nothing to report, and later hits pay it off.
func (e *entry) due(now time.Time, all bool) (cost int64, lag time.Duration, ok bool) {
	if e.u <= 0 {
		return 0, 0, false
	}
	if all {
		return e.u, 0, true
	}
	every := e.reportEvery()
	if now.Sub(e.lastReport) >= every {
		return e.u, time.Duration(max(0, now.UnixNano()-e.dueSince(every))), true
	}
	return 0, 0, false
}

// share is what this instance had to spend since its last report (at
// least 1).
func (e *entry) share() float64 { return max(1, e.tok+float64(e.u)) }

// reportEvery is how long e's unreported units may wait after its last
// report (see due); e.u > 0.
func (e *entry) reportEvery() time.Duration {
	iv := e.t.sync
	if !e.known {
		return iv
	}
	share := e.share()
	if float64(e.u) >= share/2 {
		return iv / 4 // near the share: soon, but not on every hit
	}
	w := share / (2 * float64(e.u)) * float64(iv)
	if limit := float64(max(maxReportWait, iv)); w > limit {
		w = limit
	}
	return time.Duration(w)
}

// reportBuf is one report call's buckets and results. The ledger is an
// interface, so arrays passed to it escape: pooled, a call allocates
// none (a Bucket is 176 bytes, a full call's buckets 11 KB).
type reportBuf struct {
	bs  [maxGroup]quota.Bucket
	out [maxGroup]quota.ReportResult
}

var reportBufs = sync.Pool{New: func() any { return new(reportBuf) }}

// put clears the first n buckets and results (the keys must not be kept
// alive) and returns buf to the pool.
func (buf *reportBuf) put(n int) {
	clear(buf.bs[:n])
	clear(buf.out[:n])
	reportBufs.Put(buf)
}

// report sends the reports js to the ledger in one call, numbered by the
// Store's sequence, and learns each key's state from the reply. The keys
// of a call that failed stay in flight until Resolve says whether it was
// applied (a call that timed out may have been), so that no unit is
// charged twice; a store that partitions keys fills the results of the
// partitions that answered, whose keys are done.
func (s *Store) report(ctx context.Context, js []job) error {
	seq := s.seq.Add(1)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.syncTimeout)
	defer cancel()
	buf := reportBufs.Get().(*reportBuf)
	defer buf.put(len(js))
	bs, out := buf.bs[:len(js)], buf.out[:len(js)]
	for i := range js {
		bs[i] = js[i].b
	}
	err := s.ledger.Report(cctx, s.instance, seq, bs, out)
	var lost []job
	for i := range js {
		switch {
		case out[i].Applied:
			s.reported(&js[i], out[i])
		case err != nil:
			lost = append(lost, js[i])
			if js[i].b.Cost < 0 {
				s.st.returnFailures.Add(1)
			} else {
				s.st.reportFailures.Add(1)
			}
		default: // refused whole (resolved already): not applied
			s.unreported(&js[i])
		}
	}
	if len(lost) > 0 {
		s.lmu.Lock()
		s.lost = append(s.lost, attempt{seq: seq, jobs: lost})
		s.lmu.Unlock()
	}
	return err
}

// resolveLost asks the ledger what each report call whose reply never
// came did: its applied reports are recorded as reported, the others'
// units are owed again. A call the ledger cannot answer for is asked
// again at the next Sync, and after one the ledger cannot answer for,
// the rest wait too (it is likely down: each would wait out the sync
// timeout).
func (s *Store) resolveLost(ctx context.Context) error {
	s.lmu.Lock()
	lost := s.lost
	s.lost = nil
	s.lmu.Unlock()
	if len(lost) == 0 {
		return nil
	}
	var errs []error
	var keep []attempt
	for k, a := range lost {
		if len(errs) > 0 {
			keep = append(keep, lost[k:]...)
			break
		}
		cctx, cancel := context.WithTimeout(ctx, s.cfg.syncTimeout)
		bs := make([]quota.Bucket, len(a.jobs))
		out := make([]quota.ReportResult, len(a.jobs))
		for i := range a.jobs {
			bs[i] = a.jobs[i].b
		}
		err := s.ledger.Resolve(cctx, s.instance, a.seq, bs, out)
		cancel()
		if err != nil {
			errs = append(errs, err)
			keep = append(keep, a)
			continue
		}
		for i := range a.jobs {
			j := &a.jobs[i]
			if out[i].Applied {
				s.settled(j, out[i].Charged)
			} else {
				s.unreported(j)
			}
		}
	}
	if len(keep) > 0 {
		s.lmu.Lock()
		s.lost = append(keep, s.lost...)
		s.lmu.Unlock()
	}
	return errors.Join(errs...)
}

// reported records a report the store applied: what it could not charge
// is owed again (debt), and the key learns the store's state from res.
func (s *Store) reported(j *job, res quota.ReportResult) {
	now := s.cfg.clock.Now()
	j.e.mu.Lock()
	defer j.e.mu.Unlock()
	n := max(1, s.cfg.instances())
	s.settleJob(j, res.Charged, n)
	if j.b.Cost > 0 {
		j.e.learn(float64(res.Remaining), now, n)
	}
}

// settled records a report that Resolve found applied, having charged
// charged units: as reported, without learning the store's state (the
// next report does).
func (s *Store) settled(j *job, charged int64) {
	j.e.mu.Lock()
	defer j.e.mu.Unlock()
	s.settleJob(j, charged, max(1, s.cfg.instances()))
}

// settleJob ends j's report, applied with charged units of its cost: the
// rest is debt, owed again; e.mu is held.
func (s *Store) settleJob(j *job, charged int64, n int) {
	if j.b.Cost < 0 { // a return: given back whole
		j.e.returning = 0
		s.st.returnedUnits.Add(uint64(-j.b.Cost))
		// Sync looks again: a key that now holds nothing stops being
		// pending (and can be swept once idle), instead of waiting on a
		// wake nothing would bring.
		j.e.wake.Store(0)
		s.mark(j.e)
		return
	}
	debt := j.b.Cost - charged
	j.e.inflight = 0
	j.e.wake.Store(0) // its state changed: Sync looks again
	s.mark(j.e)
	if debt > 0 {
		j.e.rise(s.cfg.clock.Now())
	}
	j.e.u = j.e.keep(j.e.u+debt, n)
	s.st.reports.Add(1)
	s.st.reportedUnits.Add(uint64(charged))
	s.st.debtUnits.Add(uint64(debt))
}

// unreported records a report the store did not apply: its units are
// owed again.
func (s *Store) unreported(j *job) {
	j.e.mu.Lock()
	defer j.e.mu.Unlock()
	if j.b.Cost < 0 { // a return: still to give back
		j.e.owed += j.e.returning
		j.e.returning = 0
		j.e.wake.Store(0)
		s.mark(j.e)
		return
	}
	j.e.inflight = 0
	j.e.wake.Store(0)
	s.mark(j.e)
	j.e.rise(s.cfg.clock.Now())
	j.e.u = j.e.keep(j.e.u+j.b.Cost, max(1, s.cfg.instances()))
}

// keep caps what an instance holds unreported at its share of the
// bucket's capacity, C/n (at least 1). Units beyond it were admitted at
// this instance's share of the rate while the store could not be told (an
// outage) or had no room (debt): the store's bucket refilled meanwhile,
// and a bucket never holds more than its capacity, so charging more than
// one share's worth when the store answers again would make the key pay
// twice for the same refill (fleetacc measured 36 % under-admission after
// a 2 s outage before this cap).
func (e *entry) keep(u int64, n int) int64 {
	return min(u, max(1, e.capacity()/int64(n)))
}

func (s *Store) logFailure(err error) {
	now := time.Now().UnixNano()
	prev := s.lastLog.Load()
	if prev != 0 && now-prev < int64(time.Second) {
		return
	}
	if s.lastLog.CompareAndSwap(prev, now) {
		s.cfg.logger.Warn("floodgate: local-first sync with the store failed; what was not sent is kept and sent again", "error", err.Error())
	}
}
