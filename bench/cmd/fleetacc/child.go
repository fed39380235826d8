package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bench/internal/harness"
	"github.com/floodgate-go/floodgate/bench/internal/history"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// childFlag, as the first argument, makes the program one process of the
// fleet: the second argument is its childConfig in JSON.
const childFlag = "-child"

// childConfig is what the parent gives each process of a run.
type childConfig struct {
	Index        int
	Procs        int
	Addrs        []string // the server's address, or the cluster's masters
	Cluster      bool
	Prefix       string // key prefix of the run's buckets
	FleetKey     string
	Mode         string // exact, leased or async
	Algorithm    string // of every rule (quota.Algorithm's name)
	Levels       int
	Keys         int
	Rate, Burst  int64
	Sync         time.Duration
	Goroutines   int
	Dur          time.Duration
	MaxOps       int64
	Offered      float64 // decisions/s of this process; 0: closed loop
	Instances    string  // fleet or static
	OnStoreError string
	FBTimeout    time.Duration
	// ClosedTimeout is fallback.WithClosedTimeout (0: the fallback's
	// default, DefaultClosedTimeout or FBTimeout if longer).
	ClosedTimeout time.Duration `json:",omitempty"`
	Batch         bool
	Seed          uint64
	// HistoryFile, when set, is where the process writes the takes it
	// recorded (one JSON history.Op a line); Broken is the fault of
	// process 0's store ("off", "skip" or "split").
	HistoryFile string `json:",omitempty"`
	Broken      string `json:",omitempty"`
	Count       bool
	windowed    bool // Algorithm counts per window (set by childMain)
}

// childResult is the line a process prints when it is done.
type childResult struct {
	Index                       int
	Decisions, Admitted, Errors uint64
	// Degraded counts decisions a fallback made (Source.Degraded).
	Degraded uint64
	// LastDegraded is when the last of those ended, in Unix nanoseconds
	// (0: none).
	LastDegraded int64
	// Opens counts the breaker's moves to open; LastBack is when it last
	// closed or local-first syncs last succeeded again after failing,
	// whichever is later (Unix ns; 0: neither): when this process was
	// back on Redis.
	Opens    int
	LastBack int64
	// PerKey is the admitted count of each principal, Demand its decisions.
	PerKey, Demand []uint64
	// WinDemand, of a window algorithm's run, is each principal's
	// decisions by the window of ruleWindow their start fell in (the key:
	// floor(start / ruleWindow), start in Unix ns).
	WinDemand map[int64][]uint64 `json:",omitempty"`
	// Sources counts decisions by Decision.Source ("+" admitted, "-"
	// denied): what decided.
	Sources map[string]uint64
	// First and Last are the start of the first decision and the end of
	// the last, in Unix nanoseconds.
	First, Last int64
	// RoundTrips and Commands are the store client's (hook counted), from
	// the start signal to after Close.
	RoundTrips, Commands uint64
	// Instances is the live count the process started with.
	Instances int
	Stats     localfirst.Stats
	// HistoryTakes is the number of takes recorded (-history),
	// HistorySkipped those passed on unrecorded.
	HistoryTakes   int   `json:",omitempty"`
	HistorySkipped int64 `json:",omitempty"`
	// Fallback is the fallback store's Stats after the run (and after
	// its last Sync): the local units it charged to Redis.
	Fallback fallbackCharges
	// Uncharged is true when the fallback store cannot charge its local
	// admits to Redis (fallback.Store.ChargesLocal false: -broken's
	// store is not a quota.Reporter).
	Uncharged bool   `json:",omitempty"`
	FirstErr  string `json:",omitempty"`
	CloseErr  string `json:",omitempty"`
}

// fallbackCharges is what a process's fallback store charged to Redis for
// the units it admitted locally (fallback.Stats).
type fallbackCharges struct {
	Charged, Debt, ReportFailures, GivenBack, Owed, Late, LateApplied, LateAnswered uint64
	SyncErr                                                                         string `json:",omitempty"`
}

// readyLine and resultLine start the lines a process writes on standard
// output; goLine is what the parent writes on its standard input.
const (
	readyLine  = "ready "
	resultLine = "result "
	goLine     = "go"
)

// childMain runs one process of the fleet: it builds the stack, says
// ready, waits for the start line on standard input, decides for the
// run's duration, closes the local-first store and prints its result. It
// exits when standard input closes (the parent is gone).
func childMain(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("-child takes one JSON argument")
	}
	var cfg childConfig
	if err := json.Unmarshal([]byte(args[0]), &cfg); err != nil {
		return fmt.Errorf("-child: %w", err)
	}
	var mode quota.Consistency
	err := mode.UnmarshalText([]byte(cfg.Mode))
	if err != nil {
		return err
	}
	var onErr quota.FailMode
	err = onErr.UnmarshalText([]byte(cfg.OnStoreError))
	if err != nil {
		return err
	}
	var alg quota.Algorithm
	if err := alg.UnmarshalText([]byte(cfg.Algorithm)); err != nil {
		return err
	}
	cfg.windowed = windowed(alg)
	// Background failures (reports and returns during a pause) are logged
	// by the stores at Warn; the parent shows standard error only when a
	// process fails.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	if len(cfg.Addrs) == 0 {
		return errors.New("-child: no Redis address")
	}
	// The context's deadline honoured (the fallback's per-call budget); a
	// dead server fails fast (DialerRetries 1) and the breaker decides.
	cnt := &harness.Counter{}
	client := newFleetClient(cfg.Cluster, cfg.Addrs, cfg.Goroutines+8, 1)
	client.AddHook(cnt)
	if cfg.HistoryFile != "" && !cfg.Batch {
		// Unbatched, each take is sent under its own context, where
		// NowHook finds its record to put the Redis time in; a batched
		// take has none (the check then places it anywhere between its
		// send and its answer).
		client.AddHook(history.NowHook{})
	}
	defer client.Close()
	fleetClient := newFleetClient(cfg.Cluster, cfg.Addrs, 0, 0)
	defer fleetClient.Close()

	var ropts []redisstore.Option
	if !cfg.Batch {
		ropts = append(ropts, redisstore.WithBatching(0, 0))
	}
	rs, err := redisstore.New(client, ropts...)
	if err != nil {
		return err
	}
	defer rs.Close()
	count := func() int { return cfg.Procs }
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	var fleetDone chan struct{}
	if cfg.Instances == "fleet" {
		m, err := fleet.New(fleetClient,
			fleet.WithKey(cfg.FleetKey),
			fleet.WithInstanceID(fmt.Sprintf("proc-%d-%d", cfg.Index, os.Getpid())),
			fleet.WithHeartbeat(250*time.Millisecond, 2*time.Second),
			fleet.WithLogger(logger),
		)
		if err != nil {
			return err
		}
		fleetDone = make(chan struct{})
		go func() {
			defer close(fleetDone)
			_ = m.Run(runCtx)
		}()
		// Start with the whole fleet counted (bounded: a process that
		// never sees it starts anyway, and reports the count it had).
		deadline := time.Now().Add(5 * time.Second)
		for m.Count() < cfg.Procs && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		count = m.Count
	}
	var opens atomic.Int64
	var lastClosed atomic.Int64
	fopts := []fallback.Option{
		fallback.WithOnStateChange(func(_ string, _, to gobreaker.State) {
			switch to {
			case gobreaker.StateOpen:
				opens.Add(1)
			case gobreaker.StateClosed:
				lastClosed.Store(time.Now().UnixNano())
			}
		}),
		fallback.WithTimeout(cfg.FBTimeout),
		fallback.WithInstances(count),
		fallback.WithLogger(logger),
	}
	switch {
	case cfg.ClosedTimeout > 0:
		fopts = append(fopts, fallback.WithClosedTimeout(cfg.ClosedTimeout))
	case cfg.FBTimeout > fallback.DefaultClosedTimeout:
		fopts = append(fopts, fallback.WithClosedTimeout(cfg.FBTimeout))
	}
	var primary quota.Store = rs
	var rec *history.Recorder
	if cfg.HistoryFile != "" {
		if cfg.Index == 0 && cfg.Broken != "" && cfg.Broken != "off" {
			f, err := history.ParseFault(cfg.Broken)
			if err != nil {
				return err
			}
			primary = history.NewBroken(rs, f, 7)
		}
		rec = history.NewRecorder(primary, cfg.Index)
		primary = rec
	}
	exact, err := fallback.New(primary, fopts...)
	if err != nil {
		return err
	}
	lf, err := localfirst.New(exact, rs, localfirst.WithInstances(count), localfirst.WithLogger(logger))
	if err != nil {
		return err
	}
	ls := levelsFor(cfg.Levels, cfg.Rate, cfg.Burst, cfg.Keys)
	limits, err := tiers.NewLimiter(lf, policyFor(ls, alg, mode, cfg.Sync, onErr, cfg.Count), tiers.WithKeyPrefix(cfg.Prefix))
	if err != nil {
		_ = lf.Close(context.Background())
		return err
	}
	// Warm up on keys of their own (scripts loaded, connections dialled),
	// so the measured keys start full.
	warm, err := tiers.NewLimiter(lf, policyFor(ls, alg, mode, cfg.Sync, onErr, cfg.Count), tiers.WithKeyPrefix(cfg.Prefix+"warm:"))
	if err != nil {
		_ = lf.Close(context.Background())
		return err
	}
	for i := range 2 * cfg.Goroutines {
		r := request(i % cfg.Keys)
		_, _, _ = warm.Admit(context.Background(), &r)
	}

	res := childResult{Index: cfg.Index, Instances: count(), PerKey: make([]uint64, cfg.Keys), Demand: make([]uint64, cfg.Keys), Sources: make(map[string]uint64)}
	if _, err := fmt.Fprintln(stdout, readyLine+"{}"); err != nil {
		return err
	}
	in := bufio.NewScanner(stdin)
	if !in.Scan() || in.Text() != goLine {
		_ = lf.Close(context.Background())
		return errors.New("no start line on standard input")
	}
	// The parent closing standard input ends the process.
	go func() {
		for in.Scan() {
		}
		os.Exit(3)
	}()
	rt0, cmd0 := cnt.RoundTrips(), cnt.Commands()
	if rec != nil {
		rec.Start()
	}

	// Async and leased keys decide locally whether Redis is there or not:
	// they are back on Redis at their first successful sync (a report or
	// a lease return) after a failed one.
	var lastSyncBack atomic.Int64
	watchDone := make(chan struct{})
	watchStop := make(chan struct{})
	go func() {
		defer close(watchDone)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		var prevFail, prevOK uint64
		failing := false
		for {
			select {
			case <-watchStop:
				return
			case <-t.C:
			}
			st := lf.Stats()
			fail, ok := st.ReportFailures+st.ReturnFailures, st.Reports+st.ReturnedUnits
			if fail != prevFail {
				failing = true
			}
			if ok != prevOK && failing {
				failing = false
				lastSyncBack.Store(time.Now().UnixNano())
			}
			prevFail, prevOK = fail, ok
		}
	}()
	hammer(limits, &cfg, &res)
	if onErr == quota.FailLocal {
		// A take decided locally may still have its call running in the
		// background (fallback's late calls, for at most the slow grace
		// or the closed budget): let every one answer or give up, so that
		// what Redis charged for it is matched with the local decision
		// (and given back when that was a deny) and in the history,
		// before this process reports. Without the wait a run at 03:18
		// UTC (2026-11-27) left Redis's count at 549 for 548 admitted
		// while every process's recorded takes and reports matched what
		// it admitted: the extra unit was charged after the record ended.
		time.Sleep(max(fallback.DefaultSlowGrace, fallback.DefaultClosedTimeout, cfg.FBTimeout, cfg.ClosedTimeout) + 100*time.Millisecond)
	}
	if rec != nil {
		rec.Stop()
		ops := rec.Ops()
		res.HistoryTakes, res.HistorySkipped = len(ops), rec.Skipped()
		if err := writeHistory(cfg.HistoryFile, ops); err != nil {
			return err
		}
	}
	close(watchStop)
	<-watchDone
	res.Opens = int(opens.Load())
	res.LastBack = max(lastClosed.Load(), lastSyncBack.Load())

	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := lf.Close(cctx); err != nil {
		res.CloseErr = err.Error()
	}
	// Charge Redis for what the fallback admitted locally and has not
	// reported yet (a background Sync may be under way: ask until none
	// is owed, bounded).
	for i := 0; i < 50; i++ {
		if err := exact.Sync(cctx); err != nil {
			res.Fallback.SyncErr = err.Error()
		}
		if st := exact.Stats(); st.Owed == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	fst := exact.Stats()
	res.Fallback = fallbackCharges{Charged: fst.Charged, Debt: fst.Debt, ReportFailures: fst.ReportFailures, GivenBack: fst.GivenBack, Owed: fst.Owed,
		Late: fst.Late, LateApplied: fst.LateApplied, LateAnswered: fst.LateAnswered, SyncErr: res.Fallback.SyncErr}
	res.Stats = lf.Stats()
	res.Uncharged = !exact.ChargesLocal()
	res.RoundTrips, res.Commands = cnt.RoundTrips()-rt0, cnt.Commands()-cmd0
	stopRun()
	if fleetDone != nil {
		<-fleetDone
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, resultLine+string(b))
	return err
}

// writeHistory writes ops to path, one JSON object a line.
func writeHistory(path string, ops []history.Op) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range ops {
		if err := enc.Encode(&ops[i]); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// worker is one goroutine's tally.
type worker struct {
	decisions, admitted, errors, degraded uint64
	lastDegraded                          int64
	perKey, demand                        []uint64
	winDemand                             map[int64][]uint64 // of a window algorithm, by start's window
	sources                               map[string]uint64
	first, last                           int64
	firstErr                              error
}

// hammer runs cfg.Goroutines goroutines calling limits.Admit on principals
// drawn uniformly from cfg.Keys, for cfg.Dur or cfg.MaxOps decisions,
// paced to cfg.Offered decisions per second when it is set.
func hammer(limits *tiers.Limiter, cfg *childConfig, res *childResult) {
	g := cfg.Goroutines
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Dur+30*time.Second)
	defer cancel()
	var stop atomic.Bool
	timer := time.AfterFunc(cfg.Dur, func() { stop.Store(true) })
	defer timer.Stop()
	perWorker := uint64(max(1, cfg.MaxOps/int64(g)))
	var every time.Duration
	if cfg.Offered > 0 {
		every = time.Duration(float64(g) / cfg.Offered * float64(time.Second))
	}
	ws := make([]worker, g)
	var wg sync.WaitGroup
	for i := range ws {
		w := &ws[i]
		w.perKey, w.demand = make([]uint64, cfg.Keys), make([]uint64, cfg.Keys)
		w.sources = make(map[string]uint64)
		if cfg.windowed {
			w.winDemand = make(map[int64][]uint64)
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Index)<<16|uint64(i)))
			reqs := make([]floodgate.Request, cfg.Keys)
			for k := range reqs {
				reqs[k] = request(k)
			}
			// The fleet's goroutines are spread evenly over one period,
			// not in phase: -offered is a steady rate, not a burst of
			// every goroutine at once each period.
			next := time.Now()
			if every > 0 {
				slot := int64(i*max(1, cfg.Procs) + cfg.Index)
				next = next.Add(time.Duration(int64(every) * slot / int64(g*max(1, cfg.Procs))))
			}
			for n := uint64(0); n < perWorker && !stop.Load(); n++ {
				if every > 0 {
					now := time.Now()
					if d := next.Sub(now); d > 0 {
						time.Sleep(d)
						if stop.Load() {
							break // the run ended while this goroutine waited for its slot
						}
					} else if -d > 10*every {
						next = now // do not make up for more than a few late starts
					}
					next = next.Add(every)
				}
				k := rng.IntN(cfg.Keys)
				r := reqs[k]
				t0 := time.Now().UnixNano()
				d, done, err := limits.Admit(ctx, &r)
				t1 := time.Now().UnixNano()
				if w.decisions == 0 {
					w.first = t0
				}
				w.last = t1
				w.decisions++
				w.demand[k]++
				if w.winDemand != nil {
					wd := w.winDemand[floorDiv(t0, int64(ruleWindow))]
					if wd == nil {
						wd = make([]uint64, cfg.Keys)
						w.winDemand[floorDiv(t0, int64(ruleWindow))] = wd
					}
					wd[k]++
				}
				if err != nil {
					if w.errors == 0 {
						w.firstErr = err
					}
					w.errors++
				}
				if d.Source.Degraded() {
					w.degraded++
					w.lastDegraded = t1
				}
				if d.Allowed {
					w.admitted++
					w.perKey[k]++
					w.sources["+"+string(d.Source)]++
				} else {
					w.sources["-"+string(d.Source)]++
				}
				if done != nil {
					done(floodgate.Result{})
				}
			}
		})
	}
	wg.Wait()
	for i := range ws {
		w := &ws[i]
		if w.decisions == 0 {
			continue
		}
		if res.Decisions == 0 || w.first < res.First {
			res.First = w.first
		}
		res.Last = max(res.Last, w.last)
		res.Decisions += w.decisions
		res.Admitted += w.admitted
		res.Errors += w.errors
		res.Degraded += w.degraded
		res.LastDegraded = max(res.LastDegraded, w.lastDegraded)
		for k, n := range w.perKey {
			res.PerKey[k] += n
			res.Demand[k] += w.demand[k]
		}
		for src, n := range w.sources {
			res.Sources[src] += n
		}
		for win, wd := range w.winDemand {
			if res.WinDemand == nil {
				res.WinDemand = make(map[int64][]uint64)
			}
			if res.WinDemand[win] == nil {
				res.WinDemand[win] = make([]uint64, cfg.Keys)
			}
			for k, n := range wd {
				res.WinDemand[win][k] += n
			}
		}
		if res.FirstErr == "" && w.firstErr != nil {
			res.FirstErr = w.firstErr.Error()
		}
	}
}
