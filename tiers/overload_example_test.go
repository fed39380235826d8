package tiers_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// The shedder's and the concurrency limiters' settings in the policy file,
// reloaded with the rate limits: Watch with WithOverload checks each
// reload against the stages before anything is swapped, and applies it.
func ExampleWithOverload() {
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
	_ = tiers.Watch(ctx, path, limits,
		tiers.WithWatchInterval(10*time.Millisecond),
		tiers.WithWatchLogger(discardLogger()),
		tiers.WithOverload(tiers.Overload{Shedder: shed, Limiter: limiter, Adaptive: adaptive}),
		tiers.WithOnReload(func(p *tiers.Policy, err error) {
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
