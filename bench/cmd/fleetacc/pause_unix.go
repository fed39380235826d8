//go:build unix

package main

import (
	"errors"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// injector stops redis-server processes (SIGSTOP) for a while at a fixed
// interval and continues them (SIGCONT): latency spikes every client sees
// at once, as a slow fork, a long command or a stalled VM would cause. On
// a cluster it stops every master together (a stalled host), or with
// rotate one master a pause, in turn.
type injector struct {
	stopc chan struct{}
	wg    sync.WaitGroup
	n     int
	err   error
}

// startInjector pauses nodes (all of them, or with rotate one at a time)
// for pauseFor every `every`, the first pause start into the run (0: one
// interval in), until stop is called or `total` has passed: a pause at
// start + k × every, up to and including `total` (as a ticker of `every`
// racing a timer of `total` did, the timer's deadline set after the
// ticker's).
func startInjector(nodes []*redistest.Process, rotate bool, start, every, pauseFor, total time.Duration) *injector {
	inj := &injector{stopc: make(chan struct{})}
	if start <= 0 {
		start = every
	}
	inj.wg.Go(func() {
		t0 := time.Now()
		end := t0.Add(total)
		for next := t0.Add(start); !next.After(end); {
			wait := time.NewTimer(time.Until(next))
			select {
			case <-inj.stopc:
				wait.Stop()
				return
			case <-wait.C:
			}
			// The next pause is one interval after this one began (a
			// late wake-up skips the pauses it missed, as a ticker's
			// dropped ticks did).
			next = next.Add(every)
			for !next.After(time.Now()) {
				next = next.Add(every)
			}
			these := nodes
			if rotate {
				these = nodes[inj.n%len(nodes) : inj.n%len(nodes)+1]
			}
			var errs []error
			for _, n := range these {
				errs = append(errs, n.Pause())
			}
			time.Sleep(pauseFor)
			for _, n := range these {
				errs = append(errs, n.Resume())
			}
			if err := errors.Join(errs...); err != nil {
				inj.err = err
				return
			}
			inj.n++
		}
	})
	return inj
}

// stop ends the injection, leaves the server running and returns how many
// pauses there were; err is then set if a signal failed.
func (inj *injector) stop() int {
	select {
	case <-inj.stopc:
	default:
		close(inj.stopc)
	}
	inj.wg.Wait()
	return inj.n
}
