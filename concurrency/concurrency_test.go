package concurrency_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
)

var ctx = context.Background()

func byUser(r *floodgate.Request) (string, bool) { return r.Identity.User, true }

func byTenant(r *floodgate.Request) (string, bool) { return r.Identity.Tenant, true }

// expensiveByUser applies only to one method.
func expensiveByUser(r *floodgate.Request) (string, bool) {
	if r.Method != "/search.v1.Search/Query" {
		return "", false
	}
	return r.Identity.User, true
}

func req(method, tenant, user string) *floodgate.Request {
	return &floodgate.Request{Method: method, Identity: floodgate.Identity{Tenant: tenant, User: user}}
}

func mustNew(t *testing.T, opts ...concurrency.Option) *concurrency.Limiter {
	t.Helper()
	l, err := concurrency.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustAdmit(t *testing.T, l *concurrency.Limiter, r *floodgate.Request) (floodgate.Decision, floodgate.Done) {
	t.Helper()
	d, done, err := l.Admit(ctx, r)
	if err != nil || !d.Allowed || done == nil {
		t.Fatalf("Admit(%s %s/%s) = %+v, done nil=%v, %v; want allowed", r.Method, r.Identity.Tenant, r.Identity.User, d, done == nil, err)
	}
	return d, done
}

func mustDeny(t *testing.T, l *concurrency.Limiter, r *floodgate.Request) (floodgate.Decision, error) {
	t.Helper()
	d, done, err := l.Admit(ctx, r)
	if d.Allowed || done != nil {
		t.Fatalf("Admit(%s %s/%s) = %+v, done nil=%v; want denied", r.Method, r.Identity.Tenant, r.Identity.User, d, done == nil)
	}
	return d, err
}

func TestGlobalCap(t *testing.T) {
	t.Parallel()
	l := mustNew(t, concurrency.WithGlobal(3), concurrency.WithRetryAfter(250*time.Millisecond))
	r := req("/a.B/C", "", "")
	var dones []floodgate.Done
	for i := range 3 {
		d, done := mustAdmit(t, l, r)
		want := floodgate.Decision{Allowed: true, Stage: floodgate.StageConcurrency, Source: floodgate.SourceConcurrency,
			Policy: "concurrency", Limit: 3, Remaining: int64(2 - i)}
		if d != want {
			t.Fatalf("admit %d: %+v, want %+v", i, d, want)
		}
		dones = append(dones, done)
	}
	d, err := mustDeny(t, l, r)
	want := floodgate.Decision{Stage: floodgate.StageConcurrency, Source: floodgate.SourceConcurrency,
		Policy: "concurrency", Limit: 3, Remaining: 0, RetryAfter: 250 * time.Millisecond}
	if d != want || err != nil {
		t.Fatalf("deny: %+v, %v; want %+v, nil", d, err, want)
	}
	dones[0](floodgate.Result{})
	_, done := mustAdmit(t, l, r)
	done(floodgate.Result{})
	dones[1](floodgate.Result{})
	dones[2](floodgate.Result{})
	if l.InFlight() != 0 {
		t.Fatalf("in flight %d, want 0", l.InFlight())
	}
}

// 2 in flight per user on one expensive method; other methods and other
// users are not affected, and keys disappear when their requests end.
func TestPerKeyCap(t *testing.T) {
	t.Parallel()
	l := mustNew(t, concurrency.WithPerKey(concurrency.PerKey{Name: "search-per-user", Cap: 2, Key: expensiveByUser}))
	search := func(user string) *floodgate.Request { return req("/search.v1.Search/Query", "t", user) }
	_, a1 := mustAdmit(t, l, search("alice"))
	d, a2 := mustAdmit(t, l, search("alice"))
	if d.Policy != "search-per-user" || d.Limit != 2 || d.Remaining != 0 {
		t.Fatalf("second alice: %+v", d)
	}
	d, _ = mustDeny(t, l, search("alice"))
	if d.Policy != "search-per-user" || d.Limit != 2 || d.Remaining != 0 || d.RetryAfter != concurrency.DefaultRetryAfter {
		t.Fatalf("deny: %+v", d)
	}
	_, b1 := mustAdmit(t, l, search("bob"))
	for range 5 { // a method the cap does not apply to: admitted, nothing held
		d, done, err := l.Admit(ctx, req("/search.v1.Search/Cheap", "t", "alice"))
		if !d.Allowed || done != nil || err != nil {
			t.Fatalf("uncapped method: %+v, done nil=%v, %v; want allowed with nil Done", d, done == nil, err)
		}
	}
	if n, _ := l.KeyInFlight("search-per-user", "alice"); n != 2 {
		t.Fatalf("alice in flight %d, want 2", n)
	}
	if k, _ := l.Keys("search-per-user"); k != 2 {
		t.Fatalf("keys tracked %d, want 2", k)
	}
	a1(floodgate.Result{})
	_, a3 := mustAdmit(t, l, search("alice"))
	a2(floodgate.Result{})
	a3(floodgate.Result{})
	b1(floodgate.Result{})
	if k, _ := l.Keys("search-per-user"); k != 0 {
		t.Fatalf("keys tracked after every request ended: %d, want 0", k)
	}
}

// With MaxKeys tracked keys in flight, a new key is denied with
// ErrTooManyKeys; existing keys still work; the table frees as keys end.
func TestPerKeyTableFull(t *testing.T) {
	t.Parallel()
	l := mustNew(t, concurrency.WithPerKey(concurrency.PerKey{Name: "per-user", Cap: 5, Key: byUser, MaxKeys: 2}))
	_, a := mustAdmit(t, l, req("/m", "", "alice"))
	_, b := mustAdmit(t, l, req("/m", "", "bob"))
	d, err := mustDeny(t, l, req("/m", "", "carol"))
	if !errors.Is(err, concurrency.ErrTooManyKeys) || d.Policy != "per-user" {
		t.Fatalf("carol: %+v, %v; want deny by per-user with ErrTooManyKeys", d, err)
	}
	_, a2 := mustAdmit(t, l, req("/m", "", "alice"))
	a(floodgate.Result{})
	a2(floodgate.Result{})
	_, c := mustAdmit(t, l, req("/m", "", "carol"))
	b(floodgate.Result{})
	c(floodgate.Result{})
	if k, _ := l.Keys("per-user"); k != 0 {
		t.Fatalf("keys %d, want 0", k)
	}
}

// Global + two per-key caps: a deny by a later cap releases the earlier
// ones; an allow names the cap with the least room.
func TestCapsCompose(t *testing.T) {
	t.Parallel()
	l := mustNew(t,
		concurrency.WithGlobal(10),
		concurrency.WithPerKey(concurrency.PerKey{Name: "per-user", Cap: 3, Key: byUser}),
		concurrency.WithPerKey(concurrency.PerKey{Name: "per-tenant", Cap: 2, Key: byTenant}),
	)
	d, x1 := mustAdmit(t, l, req("/m", "acme", "alice"))
	if d.Policy != "per-tenant" || d.Limit != 2 || d.Remaining != 1 {
		t.Fatalf("binding cap: %+v, want per-tenant 2, remaining 1", d)
	}
	_, x2 := mustAdmit(t, l, req("/m", "acme", "bob"))
	d, _ = mustDeny(t, l, req("/m", "acme", "carol"))
	if d.Policy != "per-tenant" {
		t.Fatalf("deny by %q, want per-tenant", d.Policy)
	}
	if n, _ := l.KeyInFlight("per-user", "carol"); n != 0 || l.InFlight() != 2 {
		t.Fatalf("after deny: carol %d, global %d; want 0 and 2 (released)", n, l.InFlight())
	}
	if k, _ := l.Keys("per-user"); k != 2 {
		t.Fatalf("per-user keys %d, want 2 (carol's entry removed)", k)
	}
	x1(floodgate.Result{})
	x2(floodgate.Result{})
	if l.InFlight() != 0 {
		t.Fatalf("global %d, want 0", l.InFlight())
	}
	for _, name := range []string{"per-user", "per-tenant"} {
		if k, _ := l.Keys(name); k != 0 {
			t.Fatalf("%s keys %d, want 0", name, k)
		}
	}
}

// Memory stays bounded however many distinct keys pass: entries of keys
// with nothing in flight are deleted, except a few idle ones kept for reuse.
func TestPerKeyMemoryBounded(t *testing.T) {
	t.Parallel()
	l := mustNew(t, concurrency.WithPerKey(concurrency.PerKey{Name: "per-user", Cap: 1, Key: byUser, MaxKeys: 50}))
	var held []floodgate.Done
	for i := range 20_000 {
		_, done := mustAdmit(t, l, req("/m", "", "user-"+strconv.Itoa(i)))
		held = append(held, done)
		if len(held) == 50 {
			for _, d := range held {
				d(floodgate.Result{})
			}
			held = held[:0]
		}
		if n, _ := l.Tracked("per-user"); n > 50+64*4 {
			t.Fatalf("after %d keys: %d entries in memory, want at most %d", i+1, n, 50+64*4)
		}
	}
	if k, _ := l.Keys("per-user"); k != 0 {
		t.Fatalf("keys in flight %d, want 0", k)
	}
	if n, _ := l.Tracked("per-user"); n > 64*4 {
		t.Fatalf("%d entries in memory with nothing in flight, want at most %d", n, 64*4)
	}
}

// 10 000 requests over 8 loops, ending by return, panic and cancel, leave
// every count at exactly 0 and no key tracked.
func TestNoLeaks(t *testing.T) {
	t.Parallel()
	l := mustNew(t,
		concurrency.WithGlobal(6),
		concurrency.WithPerKey(concurrency.PerKey{Name: "per-user", Cap: 2, Key: byUser}),
		concurrency.WithPerKey(concurrency.PerKey{Name: "per-tenant", Cap: 3, Key: byTenant}),
	)
	users := []string{"u0", "u1", "u2", "u3", "u4"}
	tenants := []string{"t0", "t1"}
	o := storm(func(_, n int) (*concurrency.Limiter, *floodgate.Request) {
		return l, req("/m", tenants[n%len(tenants)], users[n%len(users)])
	})
	if l.InFlight() != 0 {
		t.Errorf("global in flight %d, want 0", l.InFlight())
	}
	for _, name := range []string{"per-user", "per-tenant"} {
		if k, _ := l.Keys(name); k != 0 {
			t.Errorf("%s still tracks %d keys, want 0", name, k)
		}
	}
	if o.served.Load()+o.denied.Load() != stormSize || o.served.Load() == 0 || o.panics.Load() == 0 || o.cancels.Load() == 0 {
		t.Fatalf("served %d denied %d panics %d cancels %d", o.served.Load(), o.denied.Load(), o.panics.Load(), o.cancels.Load())
	}
	t.Logf("served %d (panics %d, cancels %d), denied %d", o.served.Load(), o.panics.Load(), o.cancels.Load(), o.denied.Load())
}

// outcomes counts what became of a storm's requests.
type outcomes struct{ served, denied, panics, cancels, errs atomic.Int64 }

// stormSize is the number of requests a storm sends.
const stormSize = 8 * 1250

// storm sends stormSize requests from 8 goroutines: request n of worker w
// goes to the Limiter pick returns and, if admitted, ends by return, panic
// or cancellation (n % 3), with its Done deferred as the transports do.
func storm(pick func(w, n int) (*concurrency.Limiter, *floodgate.Request)) *outcomes {
	var o outcomes
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range stormSize / 8 {
				n := w*stormSize/8 + i
				l, r := pick(w, n)
				rctx, cancel := context.WithCancel(ctx)
				func() {
					defer func() {
						if recover() != nil {
							o.panics.Add(1)
						}
					}()
					d, done, err := l.Admit(rctx, r)
					if err != nil {
						o.errs.Add(1)
					}
					if !d.Allowed {
						o.denied.Add(1)
						return
					}
					o.served.Add(1)
					defer done(floodgate.Result{})
					switch n % 3 {
					case 1:
						panic("handler panics")
					case 2:
						cancel()
						<-rctx.Done()
						o.cancels.Add(1)
					}
				}()
				cancel()
			}
		})
	}
	wg.Wait()
	return &o
}

func TestAdmitAllocatesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []concurrency.Option
	}{
		{"global", []concurrency.Option{concurrency.WithGlobal(100)}},
		{"global+user", []concurrency.Option{concurrency.WithGlobal(100),
			concurrency.WithPerKey(concurrency.PerKey{Name: "u", Cap: 10, Key: byUser})}},
		{"user only", []concurrency.Option{concurrency.WithPerKey(concurrency.PerKey{Name: "u", Cap: 10, Key: byUser})}},
		{"global+user+tenant", []concurrency.Option{concurrency.WithGlobal(100),
			concurrency.WithPerKey(concurrency.PerKey{Name: "u", Cap: 10, Key: byUser}),
			concurrency.WithPerKey(concurrency.PerKey{Name: "t", Cap: 10, Key: byTenant})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := mustNew(t, tc.opts...)
			r := req("/m", "acme", "alice")
			allocs := testing.AllocsPerRun(1000, func() {
				_, done, _ := l.Admit(ctx, r)
				done(floodgate.Result{})
			})
			if allocs != 0 {
				t.Errorf("Admit+Done allocates %v per request, want 0", allocs)
			}
		})
	}
}
