package policyfile_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/policyfile"
)

// concurrency: per_key: loads into caps whose key functions read the
// identity each names; a request without it is not counted.
func TestLoadPerKey(t *testing.T) {
	f, err := policyfile.Load([]byte(`rules: []
concurrency:
  global: 128
  per_key:
    - {name: per-user-in-flight, key: user, cap: 8}
    - name: per-tenant
      key: tenant
      cap: 40
      max_keys: 500
    - {name: per-key, key: api_key, cap: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.PerKey) != 3 {
		t.Fatalf("per_key: %+v", f.PerKey)
	}
	r := &floodgate.Request{Identity: floodgate.Identity{User: "alice", Tenant: "acme", APIKey: "k1"}}
	for i, want := range []struct {
		name    string
		cap     int64
		maxKeys int
		key     string
	}{{"per-user-in-flight", 8, 0, "alice"}, {"per-tenant", 40, 500, "acme"}, {"per-key", 2, 0, "k1"}} {
		c := f.PerKey[i]
		key, ok := c.Key(r)
		if c.Name != want.name || c.Cap != want.cap || c.MaxKeys != want.maxKeys || key != want.key || !ok {
			t.Errorf("per_key[%d]: %s cap %d max_keys %d, key %q %v; want %+v", i, c.Name, c.Cap, c.MaxKeys, key, ok, want)
		}
		if key, ok := c.Key(&floodgate.Request{}); ok {
			t.Errorf("per_key[%d] counts a request without its identity under %q", i, key)
		}
	}
}

// nineCaps is one per-key cap more than a Limiter holds.
var nineCaps = func() string {
	var b strings.Builder
	for _, name := range strings.Fields("a b c d e f g h i") {
		b.WriteString("    - {name: " + name + ", key: user, cap: 8}\n")
	}
	return b.String()
}()

// Every mistake in per_key: is reported under its path (with the cap's
// index) and line.
func TestLoadPerKeyErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"concurrency:\n  per_key: {name: a}\n", "concurrency.per_key: must be a list, got a mapping, at line 2"},
		{"concurrency:\n  per_key:\n    - {key: user, cap: 8}\n", "concurrency.per_key[0].name: required: the cap's policy name, as decisions report it, at line 3"},
		{"concurrency:\n  per_key:\n    - {name: a, cap: 8}\n", "concurrency.per_key[0].key: required: user, tenant or api_key, at line 3"},
		{"concurrency:\n  per_key:\n    - {name: a, key: user}\n", "concurrency.per_key[0].cap: 0 must be at least 1, at line 3"},
		{"concurrency:\n  per_key:\n    - name: a\n      key: ip\n      cap: 8\n", `concurrency.per_key[0].key: unknown key "ip" (want user, tenant or api_key), at line 4`},
		{"concurrency:\n  per_key:\n    - {name: a, key: user, cap: 0}\n", "concurrency.per_key[0].cap: 0 must be at least 1, at line 3"},
		{"concurrency:\n  per_key:\n    - {name: a, key: user, cap: 8, caps: 9}\n", "concurrency.per_key[0].caps: unknown field, at line 3"},
		{"concurrency:\n  per_key:\n    - {name: a, key: user, cap: 8}\n    - name: a\n      key: tenant\n      cap: 8\n",
			`concurrency.per_key[1].name: "a" is the name of concurrency.per_key[0] too, at line 4`},
		{"concurrency:\n  per_key:\n    - {name: 'a:b', key: user, cap: 8}\n", `concurrency.per_key[0].name: "a:b" contains ':', at line 3`},
		{"concurrency:\n  per_key:\n    - {name: concurrency, key: user, cap: 8}\n", `concurrency.per_key[0].name: "concurrency" is the global cap's policy name, at line 3`},
		{"concurrency:\n  per_key:\n    - [a]\n", "concurrency.per_key[0]: must be a mapping, got a list, at line 3"},
		{"concurrency:\n  per_key:\n" + nineCaps, "concurrency.per_key: 9 caps, at most 8, at line 3"}, // the list's line: its first item's
	} {
		_, err := policyfile.Load([]byte("rules: []\n" + tc.yaml))
		if want := shiftLine(tc.want); err == nil || err.Error() != want {
			t.Errorf("Load(%q):\n got %v\nwant %s", tc.yaml, err, want)
		}
	}
	// A File built in Go is checked the same way, by path.
	f := &policyfile.File{PerKey: []concurrency.PerKey{{Name: "a", Cap: 1, MaxKeys: -1}}}
	want := "concurrency.per_key[0].key: required: user, tenant or api_key\nconcurrency.per_key[0].max_keys: -1 is negative"
	if err := f.Validate(); err == nil || err.Error() != want {
		t.Fatalf("Validate:\n got %v\nwant %s", err, want)
	}
}

// Watch sets the Limiter's per-key caps by name (cap and key), returns a
// cap the file leaves out to its Go settings, and refuses a cap the
// Limiter was built without, or per_key: without a Limiter, changing
// nothing.
func TestWatchAppliesPerKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	byUser := func(r *floodgate.Request) (string, bool) { return r.Identity.User, true }
	lim, err := concurrency.New(concurrency.WithGlobal(100), concurrency.WithPerKey(concurrency.PerKey{Name: "per-caller", Cap: 3, Key: byUser}))
	if err != nil {
		t.Fatal(err)
	}
	l := mustLimiter(t, newMemstore(t), "rules: []\n")
	writeAtomic(t, path, "rules:\n  - {name: first, key: [user], rate: 10/1s}\nconcurrency:\n  per_key:\n    - {name: per-caller, key: tenant, cap: 1}\n")
	reloads := make(chan reload, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- policyfile.Watch(ctx, path, policyfile.Targets{Limits: l, Concurrency: lim},
			policyfile.WithInterval(5*time.Millisecond), policyfile.WithLogger(discardLogger()),
			policyfile.WithOnReload(func(f *policyfile.File, err error) { reloads <- reload{f, err} }))
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v", err)
		}
	}()
	// admitted says how many of n requests of one tenant, each of another
	// user, are admitted at once.
	admitted := func(n int) int {
		var dones []floodgate.Done
		for i := range n {
			d, done, _ := lim.Admit(ctx, &floodgate.Request{Identity: floodgate.Identity{Tenant: "acme", User: "u" + itoa(i%2)}})
			if d.Allowed {
				dones = append(dones, done)
			}
		}
		for _, done := range dones {
			done(floodgate.Result{})
		}
		return len(dones)
	}
	if rl := nextReload(t, reloads); rl.err != nil {
		t.Fatal(rl.err)
	}
	if c := lim.PerKeyCaps()[0]; c.Cap != 1 || admitted(4) != 1 {
		t.Fatalf("per_key applied: cap %d, and 4 requests of one tenant admitted %d; want cap 1 per tenant", c.Cap, admitted(4))
	}

	for _, bad := range []struct{ yaml, want string }{
		{"rules: []\nconcurrency:\n  per_key:\n    - {name: per-caller, key: user, cap: 2}\n    - {name: per-ip, key: user, cap: 2}\n",
			`concurrency.per_key[1].name: the Limiter has no per-key cap "per-ip" (its caps: "per-caller"): a per-key cap is made with the Limiter, so adding one takes a restart, not a reload, at line 5`},
		{"rules: []\nconcurrency:\n  per_key:\n    - {name: per-caller, key: user, cap: 0}\n",
			"concurrency.per_key[0].cap: 0 must be at least 1, at line 4"},
	} {
		writeAtomic(t, path, bad.yaml)
		rl := nextReload(t, reloads)
		if rl.err == nil || rl.err.Error() != bad.want {
			t.Fatalf("bad reload: %v\nwant %s", rl.err, bad.want)
		}
		if l.Policy().Rules[0].Name != "first" || lim.PerKeyCaps()[0].Cap != 1 {
			t.Fatal("a refused reload changed the rules or the cap")
		}
	}

	writeAtomic(t, path, "rules: []\n")
	if rl := nextReload(t, reloads); rl.err != nil {
		t.Fatal(rl.err)
	}
	if c := lim.PerKeyCaps()[0]; c.Cap != 3 || admitted(4) != 4 {
		t.Fatalf("per_key removed: cap %d, 4 requests of two users admitted %d; want the Go cap, 3 per user", c.Cap, admitted(4))
	}

	// per_key: for a Watch without a Limiter is refused.
	path2 := filepath.Join(t.TempDir(), "policy.yaml")
	writeAtomic(t, path2, "rules: []\nconcurrency:\n  per_key:\n    - {name: a, key: user, cap: 1}\n")
	poll, err := policyfile.NewPoller(path2, policyfile.Targets{Limits: l}, policyfile.WithLogger(discardLogger()),
		policyfile.WithOnReload(func(_ *policyfile.File, err error) { reloads <- reload{nil, err} }))
	if err != nil {
		t.Fatal(err)
	}
	poll()
	poll() // a content is acted on once two polls read it the same
	want := "concurrency.per_key: the file sets a concurrency Limiter's settings, but Watch was given none (Targets.Concurrency), at line 4"
	if rl := nextReload(t, reloads); rl.err == nil || rl.err.Error() != want {
		t.Fatalf("per_key: without a Limiter: %v\nwant %s", rl.err, want)
	}
}
