package policyfile_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// The shedder's and the concurrency limiters' settings in the policy file,
// reloaded with the rate limits: Watch checks each reload against the
// stages before anything is swapped, and applies it.
func ExampleWatch_stages() {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("floodgate-overload-example-%d.yaml", os.Getpid()))
	defer os.Remove(path)
	if err := os.WriteFile(path, []byte(`rules: []
shedder:
  adaptive: {min: 16, max: 2000}
concurrency:
  global: 400
  adaptive: {algorithm: vegas, min: 8, max: 300, bypass: critical}
`), 0o600); err != nil {
		log.Fatal(err)
	}
	shed, _ := shedder.New(100)                                          // fixed until the file says otherwise
	limiter, _ := concurrency.New(concurrency.WithGlobal(1000))          // per-key caps would go here too
	adaptive, _ := concurrency.NewAdaptive(concurrency.AdaptiveConfig{}) // Gradient2 until the file says otherwise
	store, _ := memstore.New()
	policy, _ := tiers.Load([]byte("rules: []\n"))
	limits, _ := tiers.NewLimiter(store, policy)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// Usually run for the life of the process.
	_ = policyfile.Watch(ctx, path, policyfile.Targets{Limits: limits, Shedder: shed, Concurrency: limiter, Adaptive: adaptive},
		policyfile.WithInterval(10*time.Millisecond),
		policyfile.WithLogger(discardLogger()),
		policyfile.WithOnReload(func(_ *policyfile.File, err error) {
			if err != nil {
				fmt.Println("reload failed, everything kept:", err)
			}
		}))
	fmt.Println("shedder capacity:", shed.Capacity(), "adaptive:", shed.Stats().Adaptive)
	fmt.Println("global cap:", limiter.Global())
	fmt.Println("adaptive limit:", adaptive.Config().Algorithm, adaptive.Limit())
	// Output:
	// shedder capacity: 16 adaptive: true
	// global cap: 400
	// adaptive limit: vegas 20
}

func ExampleWatch() {
	store, _ := memstore.New()
	policy, _ := tiers.Load([]byte("rules: []\n"))
	limits, _ := tiers.NewLimiter(store, policy)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// Usually run for the life of the process:
	// go policyfile.Watch(ctx, path, policyfile.Targets{Limits: limits}).
	err := policyfile.Watch(ctx, "../tiers/testdata/policy.yaml", policyfile.Targets{Limits: limits},
		policyfile.WithInterval(10*time.Millisecond),
		policyfile.WithLogger(discardLogger()),
		policyfile.WithOnReload(func(f *policyfile.File, err error) {
			if err != nil {
				fmt.Println("reload failed, old policy kept:", err)
				return
			}
			fmt.Println("reloaded:", len(f.Limits.Rules), "rules")
		}))
	fmt.Println(err)
	// Output:
	// reloaded: 7 rules
	// context deadline exceeded
}
