package demo

import (
	"strings"
	"testing"
	"time"
)

// TestFaultForOverflow: a FOR so long that AT+FOR overflows time.Duration
// is refused as ending after the run; the negative sum passed the check,
// and the paused server came back at once.
func TestFaultForOverflow(t *testing.T) {
	f, err := ParseFault("pause@5s:2562047h47m16s")
	if err != nil {
		t.Fatal(err)
	}
	err = Config{Duration: 10 * time.Second, Fault: &f}.Validate()
	if err == nil || !strings.Contains(err.Error(), "after the end of the") {
		t.Errorf("Validate(-duration 10s, -redis-fault %s) = %v; want the error that it ends after the end of the run", f, err)
	}
}
