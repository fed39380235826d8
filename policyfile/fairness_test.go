package policyfile_test

import (
	"testing"

	"github.com/floodgate-go/floodgate/policyfile"
)

// The fairness keys load into the shedder's and the wait queue's
// Fairness, and their mistakes come with their paths and lines.
func TestFairnessKeys(t *testing.T) {
	f, err := policyfile.Load([]byte(`rules: []
shedder:
  capacity: 100
  fairness: {by: tenant, weights: {free: 1, pro: 4}}
concurrency:
  global: 10
  wait: {max: 50ms, fairness: {by: ip}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if fs := f.Shedder.Fairness; fs == nil || fs.By != "tenant" || len(fs.Weights) != 2 || fs.Weights["pro"] != 4 || fs.Weights["free"] != 1 {
		t.Fatalf("shedder fairness %+v", f.Shedder.Fairness)
	}
	if w := f.Wait; w == nil || w.Fairness == nil || w.Fairness.By != "ip" || w.Fairness.Weights != nil {
		t.Fatalf("wait fairness %+v", f.Wait)
	}

	_, err = policyfile.Load([]byte(`rules: []
shedder:
  capacity: 100
  fairness:
    by: org
    weights:
      free: 0
      pro: many
      gold: 1e7
concurrency:
  global: 10
  wait: {max: 50ms, fairness: {weights: [1]}}
`))
	want := `shedder.fairness.by: "org" is not one of tenant, user, api_key, ip, at line 5
shedder.fairness.weights.free: 0 must be greater than 0 (leave the key out for the default), at line 7
shedder.fairness.weights.pro: must be a number, got "many", at line 8
shedder.fairness.weights.gold: 1e+07 must be a number in (0, 1e6], at line 9
concurrency.wait.fairness.weights: must be a mapping of plan tiers to weights, got a list, at line 12
concurrency.wait.fairness.by: required: one of tenant, user, api_key, ip, at line 12`
	if err == nil || err.Error() != want {
		t.Fatalf("Load:\n got %v\nwant %s", err, want)
	}
}
