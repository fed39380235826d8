package concurrency_test

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/shedder"
)

// In the chain order of the design (shedder, then concurrency), a request
// denied by the concurrency stage gives back its shedder slot, and the
// chain's Done releases both stages.
func TestChainWithShedder(t *testing.T) {
	t.Parallel()
	s, err := shedder.New(100)
	if err != nil {
		t.Fatal(err)
	}
	l := mustNew(t, concurrency.WithPerKey(concurrency.PerKey{Name: "per-user", Cap: 1, Key: byUser}))
	chain := floodgate.Chain{s, l}
	r := req("/m", "", "alice")
	d, done, err := chain.Admit(ctx, r)
	if !d.Allowed || done == nil || err != nil || d.Policy != "per-user" {
		t.Fatalf("first: %+v, %v", d, err)
	}
	d, done2, _ := chain.Admit(ctx, r)
	if d.Allowed || done2 != nil || d.Stage != floodgate.StageConcurrency {
		t.Fatalf("second: %+v, want a concurrency deny", d)
	}
	if s.InFlight() != 1 {
		t.Fatalf("shedder in flight %d after a concurrency deny, want 1", s.InFlight())
	}
	done(floodgate.Result{})
	if n, _ := l.KeyInFlight("per-user", "alice"); s.InFlight() != 0 || n != 0 {
		t.Fatalf("after Done: shedder %d, alice %d; want 0, 0", s.InFlight(), n)
	}
}
