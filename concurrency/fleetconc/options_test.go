package fleetconc_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/fleetconc"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// Every bad option, or bad field of a cap description, makes New return an
// error that names it ("fleetconc: <Option>: …"), and no Limiter.
func TestNewErrors(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	fleet := func(f fleetconc.PerKey) fleetconc.Option {
		if f.Client == nil {
			f.Client = c
		}
		return fleetconc.WithPerKey(f)
	}
	valid := fleet(fleetconc.PerKey{Name: "v", Cap: 1, Key: byUser})
	nine := func(add func(i int) fleetconc.Option) []fleetconc.Option {
		var opts []fleetconc.Option
		for i := range 9 {
			opts = append(opts, add(i))
		}
		return opts
	}
	for _, tc := range []struct {
		name string
		opts []fleetconc.Option
		want string
	}{
		{"nothing", nil, "fleetconc: no cap configured"},
		{"nil option", []fleetconc.Option{valid, nil}, "fleetconc: nil Option"},
		{"wait fairness", []fleetconc.Option{valid, fleetconc.WithWait(concurrency.Wait{Max: time.Second, Fairness: &floodgate.Fairness{By: "user"}})}, "fleetconc: WithWait: Fairness is not supported by the fleet-wide queue (its queues are per key; a per-key cap bounds each caller fleet-wide)"},
		{"clock", []fleetconc.Option{valid, fleetconc.WithClock(nil)}, "fleetconc: WithClock: clock is nil"},
		{"fleet name", []fleetconc.Option{fleet(fleetconc.PerKey{Cap: 1, Key: byUser})}, "fleetconc: WithPerKey: PerKey.Name is empty"},
		{"fleet colon", []fleetconc.Option{fleet(fleetconc.PerKey{Name: "a:b", Cap: 1, Key: byUser})}, `fleetconc: WithPerKey: PerKey.Name "a:b" contains ':'`},
		{"fleet dup", []fleetconc.Option{fleet(fleetconc.PerKey{Name: "f", Cap: 1, Key: byUser}), fleet(fleetconc.PerKey{Name: "f", Cap: 1, Key: byUser})}, `fleetconc: WithPerKey: cap name "f" is used twice`},
		{"fleet cap", []fleetconc.Option{fleet(fleetconc.PerKey{Name: "f", Key: byUser})}, `fleetconc: WithPerKey: PerKey.Cap 0 must be >= 1 (cap "f")`},
		{"fleet key", []fleetconc.Option{fleet(fleetconc.PerKey{Name: "f", Cap: 1})}, `fleetconc: WithPerKey: PerKey.Key is nil (cap "f")`},
		{"fleet client", []fleetconc.Option{fleetconc.WithPerKey(fleetconc.PerKey{Name: "f", Cap: 1, Key: byUser})}, `fleetconc: WithPerKey: PerKey.Client is nil (cap "f")`},
		{"fleet lease", []fleetconc.Option{fleet(fleetconc.PerKey{Name: "f", Cap: 1, Key: byUser, Lease: time.Millisecond})}, `fleetconc: WithPerKey: PerKey.Lease 1ms must be at least 10ms and whole milliseconds (cap "f")`},
		{"fleet timeout", []fleetconc.Option{fleet(fleetconc.PerKey{Name: "f", Cap: 1, Key: byUser, Timeout: -1})}, `fleetconc: WithPerKey: PerKey.Timeout -1ns is negative (cap "f")`},
		{"fleet retry", []fleetconc.Option{fleet(fleetconc.PerKey{Name: "f", Cap: 1, Key: byUser, RetryAfter: -1})}, `fleetconc: WithPerKey: PerKey.RetryAfter -1ns is negative (cap "f")`},
		{"too many fleet", nine(func(i int) fleetconc.Option {
			return fleet(fleetconc.PerKey{Name: string(rune('a' + i)), Cap: 1, Key: byUser})
		}), "fleetconc: WithPerKey: 9 fleet per-key caps, at most 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := fleetconc.New(tc.opts...)
			if err == nil || l != nil {
				t.Fatalf("New = %v, %v; want an error", l, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// New reports every bad option at once.
func TestNewJoinsErrors(t *testing.T) {
	t.Parallel()
	_, err := fleetconc.New(fleetconc.WithClock(nil), nil, fleetconc.WithPerKey(fleetconc.PerKey{Name: "u"}))
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 5 {
		t.Fatalf("error %v, want 5 joined errors (WithClock, nil Option, PerKey.Cap, PerKey.Key, PerKey.Client)", err)
	}
}

// BenchmarkAdmitDone measures a fleet per-key cap: one EVALSHA to acquire
// and one ZREM to release, against a real redis-server on loopback.
func BenchmarkAdmitDone(b *testing.B) {
	srv := redistest.Start(b)
	l, err := fleetconc.New(fleetconc.WithPerKey(fleetconc.PerKey{
		Name: "fleet-user", Cap: 1 << 30, Key: byUser, Client: srv.Client(),
	}))
	if err != nil {
		b.Fatal(err)
	}
	r := req("/m", "acme", "alice")
	b.ReportAllocs()
	for b.Loop() {
		d, done, err := l.Admit(ctx, r)
		if err != nil || !d.Allowed {
			b.Fatalf("%+v %v", d, err)
		}
		done(floodgate.Result{})
	}
}
