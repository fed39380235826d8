package policyfile_test

import (
	"errors"
	"testing"

	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/tiers"
)

// FuzzLoad: the loader never panics; it either returns a File that
// validates, or a *tiers.PolicyError whose every entry has a message.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{
		"", "rules: []\n", overloadPolicy, "shedder: {}\n", "rules: []\nshedder: ~\nconcurrency: []\n",
		"rules: []\nshedder: {fleet: {adaptive: {min: 9, max: 3}}}\nshedder: {}\n",
		"rules: []\nconcurrency: &a {global: 1}\nx: *a\n", "rules: []\nshedder:\n  adaptive: {min: 99999999999999999999, window: -1s}\n",
		"rules: []\nconcurrency:\n  adaptive: {algorithm: 1, bypass: [critical], min_samples: 1e99}\n",
		"[shedder, concurrency]\n", "{? [shedder]: 1, rules: []}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := policyfile.Load(data)
		if err != nil {
			if file != nil {
				t.Fatal("file returned with an error")
			}
			var pe *tiers.PolicyError
			if !errors.As(err, &pe) || len(pe.Errs) == 0 {
				t.Fatalf("error %v is not a non-empty *PolicyError", err)
			}
			for _, fe := range pe.Errs {
				if fe.Msg == "" || fe.Line < 0 {
					t.Fatalf("bad FieldError %+v", fe)
				}
			}
			return
		}
		if err := file.Validate(); err != nil {
			t.Fatalf("loaded file does not validate: %v", err)
		}
	})
}
