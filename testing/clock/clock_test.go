package clock_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
)

var _ floodgate.Clock = (*clock.Fake)(nil)

func TestFakeOnlyMovesWhenTold(t *testing.T) {
	c := clock.New(time.Time{})
	if got := c.Now(); !got.Equal(clock.Epoch) {
		t.Fatalf("Now() = %v, want %v", got, clock.Epoch)
	}
	if got := c.Advance(1500 * time.Millisecond); !got.Equal(clock.Epoch.Add(1500 * time.Millisecond)) {
		t.Fatalf("Advance returned %v", got)
	}
	if got := c.Now(); !got.Equal(clock.Epoch.Add(1500 * time.Millisecond)) {
		t.Fatalf("Now() after Advance = %v", got)
	}
	at := time.Date(2030, 5, 1, 0, 0, 0, 0, time.UTC)
	c.Set(at)
	if got := c.Now(); !got.Equal(at) {
		t.Fatalf("Now() after Set = %v, want %v", got, at)
	}
}
