//go:build unix

package main

import (
	"fmt"
	"sync"
	"syscall"
	"time"
)

// injector stops the redis-server process (SIGSTOP) for a while at a fixed
// interval and continues it (SIGCONT): latency spikes every client sees at
// once, as a slow fork, a long command or a stalled VM would cause.
type injector struct {
	stopc chan struct{}
	wg    sync.WaitGroup
	n     int
	err   error
}

// startInjector pauses pid for pauseFor every `every`, the first pause
// after one interval, until stop is called or `total` has passed.
func startInjector(pid int, every, pauseFor, total time.Duration) *injector {
	inj := &injector{stopc: make(chan struct{})}
	inj.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		end := time.After(total)
		for {
			select {
			case <-inj.stopc:
				return
			case <-end:
				return
			case <-t.C:
			}
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				inj.err = fmt.Errorf("pausing redis-server (pid %d): %w", pid, err)
				return
			}
			time.Sleep(pauseFor)
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				inj.err = fmt.Errorf("continuing redis-server (pid %d): %w", pid, err)
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
