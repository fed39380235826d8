package fleetshed_test

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
)

func tenantRead(tenant string) *floodgate.Request {
	return &floodgate.Request{Priority: floodgate.PriorityRead, Identity: floodgate.Identity{Tenant: tenant}}
}

// Two live instances of a fleet of 200 (non-critical shed from 160, the
// band 10): instance b holds 80, so instance a's part of the room is 80.
// On a, a noisy tenant alone takes those 80; with fairness a quiet
// tenant arriving then is still let in, up to the band above the
// threshold (10), and the noisy one is shed with the fairness policy;
// without, the quiet tenant is shed like the noisy one.
func TestFleetFairness(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{true, false} {
		_, _, a, b := twoFleets(t, 200)
		cfg := fleetshed.Config{Capacity: 200}
		if fair {
			cfg.Fairness = &floodgate.Fairness{By: "tenant"}
		}
		for _, f := range []*fleetshed.Shedder{a, b} {
			if err := f.Reconfigure(cfg); err != nil {
				t.Fatal(err)
			}
		}
		held := admitN(t, b, floodgate.PriorityRead, 80)
		mustSync(t, b, a)
		count := func(tenant string) (int, string) {
			n := 0
			for range 200 {
				d, done, err := a.Admit(ctx, tenantRead(tenant))
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					return n, d.Policy
				}
				held = append(held, done)
				n++
			}
			return n, ""
		}
		noisy, policy := count("noisy")
		if want := map[bool]string{true: "fleet-shedder.fairness", false: "fleet-shedder"}[fair]; noisy != 80 || policy != want {
			t.Fatalf("fairness %v: noisy admitted %d, shed by %q; want 80 and %s", fair, noisy, policy, want)
		}
		quiet, policy := count("quiet")
		if want := map[bool]int{true: 10, false: 0}[fair]; quiet != want || policy != "fleet-shedder" {
			t.Fatalf("fairness %v: quiet admitted %d beside it, shed by %q; want %d and fleet-shedder", fair, quiet, policy, want)
		}
		if fair {
			if c := a.Config(); c.Fairness == nil || c.Fairness.By != "tenant" {
				t.Fatalf("Config().Fairness = %+v", c.Fairness)
			}
		}
		endAll(held)
	}
}
