package storetest_test

import (
	"fmt"

	"github.com/floodgate-go/floodgate/testing/storetest"
)

// The shared vectors can be reused outside Run, for example to replay a
// store's decisions in another harness: each is a named list of steps.
func Example_vectors() {
	for _, v := range storetest.Vectors {
		fmt.Printf("%-32s %3d steps\n", v.Name, len(v.Steps))
	}
	// Output:
	// token_bucket/burst_then_rate      54 steps
	// token_bucket/cost                  9 steps
	// token_bucket/odd_rate              7 steps
	// token_bucket/refill_cap            4 steps
	// gcra/burst_then_rate              11 steps
	// gcra/cost                          6 steps
	// gcra/odd_rate_cost2                4 steps
	// gcra/odd_rate_burst3               4 steps
	// gcra/relative_precision            4 steps
	// sliding_window_counter/boundary   26 steps
	// sliding_window_counter/cost        9 steps
	// sliding_window_log/basic          14 steps
	// fixed_window/boundary_burst       14 steps
	// fixed_window/cost                  6 steps
	// fixed_window/lowered_limit         3 steps
	// sliding_window_log/lowered_limit   3 steps
	// all_or_nothing                     7 steps
}
