package demo

import (
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// FaultKind is what happens to the demo's own redis-server.
type FaultKind string

// Fault kinds.
const (
	// FaultKill: SIGKILL; connections are refused at once. With a For, a
	// new, empty redis-server starts on the same port after it.
	FaultKill FaultKind = "kill"
	// FaultPause: SIGSTOP; connections stay open and every call times
	// out, as with a stalled host. With a For, SIGCONT after it.
	FaultPause FaultKind = "pause"
)

// FaultSyntax is the form ParseFault accepts, for usage messages.
const FaultSyntax = "kill@AT[:FOR] or pause@AT[:FOR] (AT and FOR are Go durations from the start of traffic, e.g. kill@8s, pause@8s:3s)"

// Fault is a Redis fault a demo run injects into a redis-server it starts
// itself: at At after the start of traffic the server is killed or paused,
// and, when For is set, restarted or resumed For later; otherwise it stays
// down until the end of the run.
type Fault struct {
	Kind FaultKind
	At   time.Duration
	For  time.Duration // 0: until the end of the run
}

// ParseFault parses kill@AT[:FOR] or pause@AT[:FOR], for example
// "kill@8s" (killed at 8 s, never back) or "pause@8s:3s" (paused from 8 s
// to 11 s).
func ParseFault(s string) (Fault, error) {
	bad := func(why string) (Fault, error) {
		return Fault{}, fmt.Errorf("demo: redis fault %q: %s; want %s", s, why, FaultSyntax)
	}
	kind, when, ok := strings.Cut(s, "@")
	if !ok {
		if kind == string(FaultKill) || kind == string(FaultPause) {
			return bad("missing @AT, the time of the fault")
		}
		return bad("no @")
	}
	f := Fault{Kind: FaultKind(kind)}
	if f.Kind != FaultKill && f.Kind != FaultPause {
		return bad(fmt.Sprintf("unknown kind %q", kind))
	}
	at, length, hasFor := strings.Cut(when, ":")
	var err error
	if f.At, err = time.ParseDuration(at); err != nil {
		return bad(fmt.Sprintf("AT %q is not a duration", at))
	}
	if f.At < 0 {
		return bad(fmt.Sprintf("AT %s is negative", f.At))
	}
	if hasFor {
		if f.For, err = time.ParseDuration(length); err != nil {
			return bad(fmt.Sprintf("FOR %q is not a duration", length))
		}
		if f.For <= 0 {
			return bad(fmt.Sprintf("FOR %s must be > 0 (omit it to keep Redis down until the end)", f.For))
		}
	}
	return f, nil
}

// String returns f in the syntax ParseFault reads.
func (f Fault) String() string {
	s := string(f.Kind) + "@" + f.At.String()
	if f.For > 0 {
		s += ":" + f.For.String()
	}
	return s
}

// check reports whether f fits in a run of length d.
func (f Fault) check(d time.Duration) error {
	if f.Kind != FaultKill && f.Kind != FaultPause {
		return fmt.Errorf("demo: redis fault: unknown kind %q; want %s", f.Kind, FaultSyntax)
	}
	if f.At < 0 || f.For < 0 {
		return fmt.Errorf("demo: redis fault %s: negative time", f)
	}
	if f.At >= d {
		return fmt.Errorf("demo: redis fault %s: at %s is not before the end of the %s run", f, f.At, d)
	}
	if f.For > 0 && f.For > d-f.At { // not f.At+f.For > d: the sum can wrap
		return fmt.Errorf("demo: redis fault %s: ends at %s, after the end of the %s run (omit FOR to keep Redis down until the end)", f, f.At+f.For, d)
	}
	return nil
}

// verb describes the fault and the recovery, for markers and captions.
func (f Fault) verb() (down, up string) {
	if f.Kind == FaultKill {
		return "Redis killed", "restarted (empty)"
	}
	return "Redis paused", "resumed"
}

// faultServer is the redis-server a fault run starts and breaks.
type faultServer struct {
	p *redistest.Process
}

// startFaultServer starts a redis-server on a free loopback port, through
// testing/redistest, the way the tests start theirs.
func startFaultServer() (*faultServer, error) {
	p, err := redistest.StartProcessHandle()
	if err != nil {
		return nil, fmt.Errorf("demo: a redis fault needs a redis-server of the demo's own, which could not start: %w", err)
	}
	return &faultServer{p: p}, nil
}

func (s *faultServer) addr() string { return s.p.Addr() }

// stop kills and reaps the server, paused or not.
func (s *faultServer) stop() { s.p.Stop() }

// inject breaks the server as f says.
func (s *faultServer) inject(f Fault) error {
	if f.Kind == FaultKill {
		return s.p.Kill()
	}
	return s.p.Pause()
}

// recover undoes inject: a new server on the same port after a kill,
// SIGCONT after a pause.
func (s *faultServer) recover(f Fault) error {
	if f.Kind == FaultKill {
		return s.p.Restart()
	}
	return s.p.Resume()
}
