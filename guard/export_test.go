package guard

import (
	"fmt"

	"github.com/floodgate-go/floodgate"
)

// typeName is the type of the stage a wrapper holds, through the unwrap
// convention.
func typeName(v any) string {
	if u, ok := v.(interface{ Unwrap() floodgate.Admitter }); ok {
		return typeName(u.Unwrap())
	}
	return fmt.Sprintf("%T", v)
}

// withClock gives the load meter clk.
func withClock(clk floodgate.Clock) Option {
	return func(c *config) { c.clock = clk }
}
