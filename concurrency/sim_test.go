package concurrency_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// service is a processor-sharing model of a service on fake time: up to
// servers requests are worked on at full speed, more share them, so a
// request takes work of wall time when at most servers are in flight and
// proportionally longer beyond. It is driven by clients closed-loop
// clients that call again 1ms after each answer or deny. Everything is
// deterministic, so a run's counts are exact.
type service struct {
	servers int
	work    time.Duration
	clients int
}

type job struct {
	done   floodgate.Done
	left   time.Duration // work left
	client int
}

// simStats is what a run of the model measured.
type simStats struct {
	served, denied int
	limits         []int64 // the limit at the end of every window of the limiter
}

// run drives a for d on clk, one step per millisecond; change, when not
// nil, is called at every step with the elapsed time and may change the
// service.
func (s *service) run(t *testing.T, a *concurrency.Adaptive, clk *clock.Fake, d time.Duration, change func(elapsed time.Duration, s *service)) simStats {
	t.Helper()
	const step = time.Millisecond
	var (
		st     simStats
		jobs   []job
		wait   = make([]time.Duration, s.clients) // until each client calls again; -1 while in flight
		reqs   = make([]floodgate.Request, s.clients)
		window = a.Config().Window
	)
	for elapsed := time.Duration(0); elapsed < d; elapsed += step {
		if change != nil {
			change(elapsed, s)
		}
		for c := range wait {
			switch {
			case wait[c] < 0:
				continue
			case wait[c] > 0:
				wait[c] -= step
				continue
			}
			dec, done, _ := a.Admit(ctx, &reqs[c])
			if !dec.Allowed {
				st.denied++
				wait[c] = step
				continue
			}
			jobs = append(jobs, job{done: done, left: s.work, client: c})
			wait[c] = -1
		}
		clk.Advance(step)
		share := step
		if len(jobs) > s.servers {
			share = step * time.Duration(s.servers) / time.Duration(len(jobs))
		}
		kept := jobs[:0]
		for i := range jobs {
			j := &jobs[i]
			if j.left -= share; j.left > 0 {
				kept = append(kept, *j)
				continue
			}
			j.done(floodgate.Result{Outcome: floodgate.OutcomeSuccess})
			st.served++
			wait[j.client] = step
		}
		jobs = kept
		if (elapsed+step)%window == 0 {
			st.limits = append(st.limits, a.Limit())
		}
	}
	for _, j := range jobs {
		j.done(floodgate.Ignored)
	}
	if a.InFlight() != 0 {
		t.Fatalf("in flight %d after the run, want 0", a.InFlight())
	}
	return st
}

func limitRange(ls []int64) (lo, hi int64) {
	lo, hi = ls[0], ls[0]
	for _, l := range ls {
		lo, hi = min(lo, l), max(hi, l)
	}
	return lo, hi
}

// Each algorithm, started well below a service of 20 servers and 10ms of
// work offered 100 closed-loop clients (5x), converges into the band its
// rule predicts and stays there; when the work then doubles (a latency
// step: the same 20 servers, each request twice as long), the limit falls.
// The rules count windows, not seconds: windows of 100ms (each still
// closes on a few hundred samples) take the limit where the default 1s
// windows do, in a tenth of the simulated time, so the run is the 80
// windows its checks read: 60 before the step, 20 after.
//
//   - Gradient2 settles where tolerance*long/rtt = 1 - 1/sqrt(limit): rtt
//     about 1.8x its long-run level, a limit of about 1.8 x 20;
//   - Vegas stops growing when its queue estimate reaches Alpha*log10, at
//     about 1.2 x 20;
//   - AIMD (Timeout 25ms) grows until latency passes 25ms at 50 in flight
//     and saw-tooths between 0.9 x 51 and 51.
func TestAdaptiveConvergesAndReactsToLatencyStep(t *testing.T) {
	t.Parallel()
	const (
		servers = 20
		window  = 100 * time.Millisecond
		step    = 60 // the window at whose start the work doubles
	)
	for _, tc := range []struct {
		alg            concurrency.AdaptiveAlgorithm
		lo, hi         int64 // the band of the last 20 windows before the step
		afterStepBelow int64 // the limit 20 windows after the step is below this
	}{
		{concurrency.Gradient2, 30, 40, 25},
		{concurrency.Vegas, 20, 30, 15},
		{concurrency.AIMD, 45, 51, 30},
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			t.Parallel()
			clk := clock.New(time.Time{})
			a, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{
				Algorithm: tc.alg, Initial: 5, Max: 200, Timeout: 25 * time.Millisecond, Clock: clk, Window: window,
				ProbeEvery: 1000, // Vegas's probe is TestVegasProbe's
			})
			if err != nil {
				t.Fatal(err)
			}
			s := &service{servers: servers, work: 10 * time.Millisecond, clients: 100}
			st := s.run(t, a, clk, (step+20)*window, func(e time.Duration, s *service) {
				if e == step*window {
					s.work = 20 * time.Millisecond
				}
			})
			if lo, hi := limitRange(st.limits[step-20 : step]); lo < tc.lo || hi > tc.hi {
				t.Errorf("limit over windows %d-%d in [%d, %d], want within [%d, %d]; the limit at every window's end: %v", step-20, step, lo, hi, tc.lo, tc.hi, st.limits)
			}
			if got := st.limits[step+19]; got >= tc.afterStepBelow {
				t.Errorf("limit 20 windows after the latency step %d, want below %d; the limit at every window's end: %v", got, tc.afterStepBelow, st.limits)
			}
			// Past the start the service is never starved: every limit of
			// the last 20 windows before the step is at least the 20
			// servers.
			if lo, _ := limitRange(st.limits[step-20 : step]); lo < servers {
				t.Errorf("limit fell to %d, below the service's %d servers", lo, servers)
			}
		})
	}
}
