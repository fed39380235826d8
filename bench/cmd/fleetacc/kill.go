package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// killer kills the run's redis-server (SIGKILL) at one moment and starts
// it again, empty, on the same port after the outage: a crash and a
// restart without persistence.
type killer struct {
	done                  chan struct{}
	err                   error
	killedAt, restartedAt int64 // Unix ns; restartedAt once it answers PING
}

// startKiller kills p after `at` and restarts it `outage` later.
func startKiller(p *redistest.Process, at, outage time.Duration) *killer {
	k := &killer{done: make(chan struct{})}
	go func() {
		defer close(k.done)
		time.Sleep(at)
		k.killedAt = time.Now().UnixNano()
		if err := p.Kill(); err != nil {
			k.err = fmt.Errorf("killing redis-server: %w", err)
			return
		}
		time.Sleep(outage)
		if err := p.Restart(); err != nil {
			k.err = fmt.Errorf("restarting redis-server: %w", err)
			return
		}
		k.restartedAt = time.Now().UnixNano()
	}()
	return k
}

// wait waits until Redis is back and returns what failed.
func (k *killer) wait() error {
	select {
	case <-k.done:
	case <-time.After(2 * time.Minute):
		return errors.New("redis-server was not restarted within 2 minutes")
	}
	return k.err
}

func killDesc(cfg config) string {
	if cfg.kill <= 0 {
		return "off"
	}
	return fmt.Sprintf("SIGKILL %s into killed runs, restarted empty on the same port %s later; back on Redis within %s promised (open interval %s + one probe %s + go-redis dial backoff 1s)",
		cfg.killAt, cfg.kill, recoveryBound(cfg), fallback.DefaultOpenInterval, probeTimeout(cfg))
}

// probeTimeout is how long the breaker's probe may wait on Redis: the
// closed budget (fallback's doc).
func probeTimeout(cfg config) time.Duration { return closedBudget(cfg) }

// closedBudget is how long a call of a rule with on_store_error closed
// waits for Redis: -closed-timeout, or the fallback's default for it
// (DefaultClosedTimeout, or -fallback-timeout if longer).
func closedBudget(cfg config) time.Duration {
	if cfg.closedTimeout > 0 {
		return cfg.closedTimeout
	}
	return max(cfg.fbTimeout, fallback.DefaultClosedTimeout)
}

// recoveryBound is how soon after Redis answers again every process must
// decide on it: the breaker's open interval (the probe waits for its end),
// the probe itself, and the second go-redis may wait before it dials again
// after a run of failed dials (fallback's package doc).
func recoveryBound(cfg config) time.Duration {
	return fallback.DefaultOpenInterval + probeTimeout(cfg) + time.Second
}

// asyncSlack is the async bound's extra per bucket: n × rate × sync
// interval (tiers/localfirst's package doc, for the worst case, raised
// from its (n−1)/n × (C + rate × I) only by what arrives in a report's
// round trip).
func asyncSlack(cfg config, l level) float64 {
	return float64(cfg.procs) * float64(l.rate) * cfg.sync.Seconds()
}

// killSlack is what a killed run may admit over a bucket's bound. The
// restarted Redis kept nothing and holds the bucket full again: one
// capacity, plus one unit per process (a local burst is at least 1) and,
// for async, its own bound. With on_store_error closed that is all: what
// Redis does not decide is denied. With local, each process also decides
// at rate/n from its share of what Redis last said, which Redis never
// counts: the share it starts the outage with (up to a capacity over the
// fleet), and the calls decided locally because they were slower than the
// fallback's timeout while Redis still answered the others, up to the
// rate for as long as that lasts. That last term has no bound fleetacc can
// state in advance (a CI run on a loaded 2-core machine went 137 units
// over one bucket of capacity 50 with 2 processes), so for local the
// printed bound, two capacities, is a target and not enforced (see
// killBoundEnforced). A rule that fails open has no bound.
func killSlack(cfg config, mode string, l level) float64 {
	s := float64(l.burst) + float64(cfg.procs)
	switch cfg.onErr {
	case "open":
		return 1e18
	case "local":
		s += float64(l.burst)
	}
	if mode == "async" {
		s += asyncSlack(cfg, l)
	}
	return s
}

// killBoundEnforced reports whether a killed run fails when it goes over
// killSlack: only with on_store_error closed (see killSlack).
func killBoundEnforced(cfg config) bool { return cfg.onErr == "closed" }

// recovery is how long after Redis answered again the last process was
// back on it: its breaker closed and its syncs succeeded (0 if all were
// back before).
func (r *row) recovery() time.Duration {
	if r.restartedAt == 0 || r.lastBack <= r.restartedAt {
		return 0
	}
	return time.Duration(r.lastBack - r.restartedAt)
}

// lastLocal is how long after Redis answered again the last decision
// without it was made. It may be later than recovery: on a busy machine a
// call slower than the fallback's timeout is decided locally (from what
// Redis last said) without opening the breaker.
func (r *row) lastLocal() time.Duration {
	if r.restartedAt == 0 || r.lastDegraded <= r.restartedAt {
		return 0
	}
	return time.Duration(r.lastDegraded - r.restartedAt)
}

// localSlack is what a paused run of exact rules with on_store_error
// local may admit over a bucket's bound: the fallback's bound for one
// slow period of length T = -pause-for, C − R + r·T ≤ C + r·T (package
// fallback's documentation: stale views of the bucket, plus the refill of
// the period above what each process may owe). What the processes
// admitted locally is charged to Redis when it answers, so the excess of
// earlier pauses is paid back from the bucket's refill and one period's
// excess is what may remain at the end of the window.
func localSlack(cfg config, l level) float64 {
	return float64(l.burst) + float64(l.rate)*cfg.pauseFor.Seconds()
}
