package concurrency_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
)

// SetPerKey lowers a cap under requests in flight (new ones are denied
// under the new cap until enough finish), moves it to another key (the
// slots taken under the old key are released under it), and PerKeyCaps
// says what is in force.
func TestSetPerKey(t *testing.T) {
	t.Parallel()
	l := mustNew(t, concurrency.WithGlobal(100), concurrency.WithPerKey(concurrency.PerKey{Name: "per-user", Cap: 3, Key: byUser}))
	if got := l.PerKeyCaps(); len(got) != 1 || got[0].Name != "per-user" || got[0].Cap != 3 || got[0].MaxKeys != concurrency.DefaultMaxKeys {
		t.Fatalf("PerKeyCaps() = %+v, want per-user at 3 with the default MaxKeys", got)
	}
	alice := req("/m", "acme", "alice")
	_, done1 := mustAdmit(t, l, alice)
	_, done2 := mustAdmit(t, l, alice)

	if err := l.SetPerKey(concurrency.PerKey{Name: "per-user", Cap: 2, Key: byUser, MaxKeys: 50}); err != nil {
		t.Fatal(err)
	}
	if got := l.PerKeyCaps()[0]; got.Cap != 2 || got.MaxKeys != 50 {
		t.Fatalf("after SetPerKey: %+v, want Cap 2, MaxKeys 50", got)
	}
	d, err := mustDeny(t, l, alice) // 2 in flight, the new cap is 2
	if err != nil || d.Policy != "per-user" || d.Limit != 2 {
		t.Fatalf("third of alice's under cap 2: %+v, %v; want denied by per-user, limit 2", d, err)
	}
	done1(floodgate.Result{})
	_, done3 := mustAdmit(t, l, alice)

	// The cap moves to the tenant: alice's slots are released under her
	// user key, and acme's requests are counted from now on.
	if err := l.SetPerKey(concurrency.PerKey{Name: "per-user", Cap: 1, Key: byTenant}); err != nil {
		t.Fatal(err)
	}
	bob := req("/m", "acme", "bob")
	_, done4 := mustAdmit(t, l, bob)
	if d, _ := mustDeny(t, l, req("/m", "acme", "carol")); d.Policy != "per-user" || d.Limit != 1 {
		t.Fatalf("a second acme request under a tenant cap of 1: %+v", d)
	}
	mustAdmit(t, l, req("/m", "globex", "bob"))
	done2(floodgate.Result{})
	done3(floodgate.Result{})
	if n, _ := l.KeyInFlight("per-user", "alice"); n != 0 {
		t.Errorf("alice's slots after their release: %d in flight, want 0", n)
	}
	if n, _ := l.KeyInFlight("per-user", "acme"); n != 1 {
		t.Errorf("acme in flight %d, want 1 (bob)", n)
	}
	done4(floodgate.Result{})
	if n, _ := l.KeyInFlight("per-user", "acme"); n != 0 {
		t.Errorf("acme in flight %d after bob's release, want 0", n)
	}
}

// A higher cap lets a request waiting for a slot of its key in, with no
// release.
func TestSetPerKeyWakesWaiters(t *testing.T) {
	t.Parallel()
	l := mustNew(t, concurrency.WithPerKey(concurrency.PerKey{Name: "per-user", Cap: 1, Key: byUser}),
		concurrency.WithWait(concurrency.Wait{Max: time.Hour}))
	_, done := mustAdmit(t, l, req("/m", "acme", "alice"))
	defer done(floodgate.Result{})
	out := make(chan outcome, 1)
	waitingAdmit(t, l, ctx, req("/m", "acme", "alice"), "alice-2", 1, out)
	if err := l.SetPerKey(concurrency.PerKey{Name: "per-user", Cap: 2, Key: byUser}); err != nil {
		t.Fatal(err)
	}
	o := recv(t, out)
	if !o.d.Allowed || o.d.Limit != 2 {
		t.Fatalf("the waiting request after the cap rose to 2: %+v", o.d)
	}
	o.done(floodgate.Result{})
}

// SetPerKey reports every bad field and a name the Limiter has no cap
// of, and then changes nothing.
func TestSetPerKeyErrors(t *testing.T) {
	t.Parallel()
	l := mustNew(t, concurrency.WithPerKey(concurrency.PerKey{Name: "per-user", Cap: 3, Key: byUser}),
		concurrency.WithPerKey(concurrency.PerKey{Name: "per-tenant", Cap: 9, Key: byTenant}))
	for _, tc := range []struct {
		c    concurrency.PerKey
		want []string
	}{
		{concurrency.PerKey{Name: "per-ip", Cap: 1, Key: byUser},
			[]string{`concurrency: SetPerKey: the Limiter has no per-key cap "per-ip" (its caps: "per-user", "per-tenant"); caps are added by New only`}},
		{concurrency.PerKey{Name: "per-user", Cap: 0, MaxKeys: -1},
			[]string{`PerKey.Cap 0 must be >= 1 (cap "per-user")`, `PerKey.Key is nil (cap "per-user")`, `PerKey.MaxKeys -1 is negative (cap "per-user")`}},
		{concurrency.PerKey{Cap: 1, Key: byUser}, []string{"SetPerKey: PerKey.Name is empty"}},
	} {
		err := l.SetPerKey(tc.c)
		if err == nil {
			t.Fatalf("SetPerKey(%+v): no error", tc.c)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("SetPerKey(%+v) = %q, want it to say %q", tc.c, err, w)
			}
		}
	}
	if got := l.PerKeyCaps(); got[0].Cap != 3 || got[1].Cap != 9 {
		t.Errorf("after refused changes: %+v, want the caps unchanged", got)
	}
	if got := mustNew(t, concurrency.WithGlobal(1)).PerKeyCaps(); got != nil {
		t.Errorf("PerKeyCaps() of a Limiter without per-key caps = %+v, want nil", got)
	}
}
