package clock_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/testing/clock"
)

func TestAfterFiresOnFakeTime(t *testing.T) {
	c := clock.New(time.Time{})
	late := c.After(300 * time.Millisecond)
	early := c.After(100 * time.Millisecond)
	if n := c.Timers(); n != 2 {
		t.Fatalf("Timers = %d, want 2", n)
	}
	c.Advance(99 * time.Millisecond)
	select {
	case <-early:
		t.Fatal("fired 1ms early")
	default:
	}
	c.Advance(time.Millisecond)
	select {
	case got := <-early:
		if want := clock.Epoch.Add(100 * time.Millisecond); !got.Equal(want) {
			t.Fatalf("fired with %v, want %v", got, want)
		}
	default:
		t.Fatal("did not fire at its instant")
	}
	if n := c.Timers(); n != 1 {
		t.Fatalf("Timers = %d, want 1", n)
	}
	c.Set(clock.Epoch.Add(time.Second))
	select {
	case <-late:
	default:
		t.Fatal("Set past its instant did not fire it")
	}
	select {
	case <-c.After(0):
	default:
		t.Fatal("After(0) did not fire at once")
	}
	if n := c.Timers(); n != 0 {
		t.Fatalf("Timers = %d, want 0", n)
	}
}
