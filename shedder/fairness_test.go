package shedder_test

import (
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder"
)

func read(tenant, tier string) *floodgate.Request {
	return &floodgate.Request{Priority: floodgate.PriorityRead, Tier: tier, Identity: floodgate.Identity{Tenant: tenant}}
}

// admitAll admits r until the first shed or n admits, and returns the
// Dones and the shed Decision (zero if none).
func admitAll(t *testing.T, s *shedder.Shedder, r *floodgate.Request, n int) ([]floodgate.Done, floodgate.Decision) {
	t.Helper()
	var dones []floodgate.Done
	for range n {
		d, done, err := s.Admit(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			return dones, d
		}
		dones = append(dones, done)
	}
	return dones, floodgate.Decision{}
}

func fairShedder(t *testing.T, f *floodgate.Fairness) *shedder.Shedder {
	t.Helper()
	s, err := shedder.New(100, shedder.WithHysteresis(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reconfigure(shedder.Config{Capacity: 100, Fairness: f}); err != nil {
		t.Fatal(err)
	}
	return s
}

// Capacity 100, reads shed from 80, writes from 90. A noisy tenant alone
// takes all 80 of the read room (nobody else wants it); a quiet tenant
// arriving then is still let in, up to the write threshold (90), and the
// noisy one is shed with the fairness policy. As the noisy tenant's
// requests end, the quiet one takes their room (it may hold 1.5 times its
// share, 40 of 80 with two tenants in flight), and the noisy one, not
// refused often enough to be held to its share, is let in again below the
// read threshold and shed above its 60. Without fairness, the quiet
// tenant is shed from 80 like the noisy one.
func TestFairnessShedsTheCallerOverItsShare(t *testing.T) {
	t.Parallel()
	s := fairShedder(t, &floodgate.Fairness{By: "tenant"})
	noisy, d := admitAll(t, s, read("noisy", ""), 200)
	if len(noisy) != 80 || d.Policy != "shedder.fairness" {
		t.Fatalf("noisy alone: %d admitted, shed by %q; want 80 and shedder.fairness", len(noisy), d.Policy)
	}
	quiet, d := admitAll(t, s, read("quiet", ""), 200)
	if len(quiet) != 10 || d.Policy != "shedder" {
		t.Fatalf("quiet beside it: %d admitted (up to the write threshold), shed by %q; want 10 and shedder", len(quiet), d.Policy)
	}
	if d, _, _ := s.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityWrite}); !d.Allowed {
		t.Fatalf("a write shed at 90 in flight: fairness among reads took the writes' room: %+v", d)
	}
	// The noisy tenant's requests end: 40 of them.
	for _, done := range noisy[:40] {
		done(floodgate.Result{})
	}
	noisy = noisy[40:]
	// 40 + 10 + 1 write in flight: the read gate is open, everyone is let in.
	more, _ := admitAll(t, s, read("noisy", ""), 29)
	noisy = append(noisy, more...)
	if len(more) != 29 || s.InFlight() != 80 {
		t.Fatalf("below the read threshold: noisy let in %d of 29, %d in flight; want 29 and 80", len(more), s.InFlight())
	}
	if _, d := admitAll(t, s, read("noisy", ""), 1); d.Policy != "shedder.fairness" {
		t.Fatalf("noisy at 69 of its 60: %+v, want shed by shedder.fairness", d)
	}
	// The quiet tenant holds 10 of 60: it is let in up to the write threshold.
	more, _ = admitAll(t, s, read("quiet", ""), 200)
	if len(more) != 10 {
		t.Fatalf("quiet at 10 of its 60 with 80 in flight: %d let in, want 10", len(more))
	}
	quiet = append(quiet, more...)
	for _, done := range append(noisy, quiet...) {
		done(floodgate.Result{})
	}

	plain, err := shedder.New(100, shedder.WithHysteresis(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	admitAll(t, plain, read("noisy", ""), 200)
	if q, d := admitAll(t, plain, read("quiet", ""), 200); len(q) != 0 || d.Policy != "shedder" {
		t.Fatalf("without fairness the quiet tenant had %d admitted, shed by %q; want 0 and shedder", len(q), d.Policy)
	}
}

// A tier's weight scales its callers' share: with weights free 1, pro 3,
// reads shed from 100 in flight (capacity 1000) and writes from 1000,
// the pro tenant's share of the reads' room is 75 (it may hold 1.5 times
// that, but no more than the room: 100) and the free one's 25 (38).
func TestFairnessWeightsByTier(t *testing.T) {
	t.Parallel()
	s, err := shedder.New(1000, shedder.WithHysteresis(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reconfigure(shedder.Config{Capacity: 1000, Thresholds: shedder.Thresholds{Test: 0.05, Read: 0.1, Write: 1}, Fairness: &floodgate.Fairness{By: "tenant", Weights: map[string]float64{"free": 1, "pro": 3}}}); err != nil {
		t.Fatal(err)
	}
	hold(t, s, 98) // critical requests: never counted among the callers
	pro, free := read("p", "pro"), read("f", "free")
	held := map[*floodgate.Request]int{}
	for _, r := range []*floodgate.Request{pro, free} {
		if d, _, _ := s.Admit(ctx, r); !d.Allowed {
			t.Fatalf("below the read threshold: %+v", d)
		}
		held[r]++
	}
	for more := true; more; {
		more = false
		for _, r := range []*floodgate.Request{pro, free} {
			if d, _, _ := s.Admit(ctx, r); d.Allowed {
				held[r]++
				more = true
			}
		}
	}
	if held[pro] != 100 || held[free] != 38 {
		t.Fatalf("pro holds %d, free %d; want 100 and 38", held[pro], held[free])
	}
}

func TestFairnessConfig(t *testing.T) {
	t.Parallel()
	s := fairShedder(t, &floodgate.Fairness{By: "user", Weights: map[string]float64{"pro": 2}})
	c := s.Config()
	if c.Fairness == nil || c.Fairness.By != "user" || c.Fairness.Weights["pro"] != 2 {
		t.Fatalf("Config().Fairness = %+v, want by user, pro 2", c.Fairness)
	}
	c.Fairness.Weights["pro"] = 9
	if s.Config().Fairness.Weights["pro"] != 2 {
		t.Fatal("changing the Config's weights changed the Shedder's")
	}
	err := s.Reconfigure(shedder.Config{Capacity: 100, Fairness: &floodgate.Fairness{By: "org", Weights: map[string]float64{"pro": -1}}})
	want := []string{`shedder: Config: fairness.by: "org" is not one of tenant, user, api_key, ip`, "shedder: Config: fairness.weights.pro: -1 must be a number in (0, 1e6]"}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("bad fairness: %v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	if s.Config().Fairness.By != "user" {
		t.Fatal("a rejected Config changed the fairness in force")
	}
	if err := s.Reconfigure(shedder.Config{Capacity: 100}); err != nil || s.Config().Fairness != nil {
		t.Fatalf("fairness not turned off: %v, %+v", err, s.Config().Fairness)
	}
}
