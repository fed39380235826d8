package clock_test

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/testing/clock"
)

// After is time.After on fake time: its channel receives once the test
// moves the clock far enough.
func ExampleFake_After() {
	c := clock.New(time.Time{})
	ch := c.After(100 * time.Millisecond)
	fmt.Println("waiting:", c.Timers())
	c.Advance(100 * time.Millisecond)
	fmt.Println("fired at:", (<-ch).Sub(clock.Epoch), "waiting:", c.Timers())
	// Output:
	// waiting: 1
	// fired at: 100ms waiting: 0
}
