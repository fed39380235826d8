package tiers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/tiers"
)

// TestNewLimiterOptionErrors: NewLimiter reports every bad option at once,
// naming it, and a nil option is one of them.
func TestNewLimiterOptionErrors(t *testing.T) {
	p, err := tiers.Load([]byte("rules:\n  - {name: a, rate: 1/1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tiers.NewLimiter(newMemstore(t), p, tiers.WithKeyPrefix("bad prefix"), nil)
	if err == nil {
		t.Fatal("NewLimiter accepted a bad prefix and a nil option")
	}
	if !errors.Is(err, tiers.ErrKeyPrefix) {
		t.Errorf("err = %v, want ErrKeyPrefix", err)
	}
	for _, want := range []string{`tiers: WithKeyPrefix:`, `"bad prefix"`, "tiers: nil Option"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q does not mention %s", err, want)
		}
	}
}

// TestWatchOptionErrors: Watch reports every bad option before it starts.
func TestWatchOptionErrors(t *testing.T) {
	p, err := tiers.Load([]byte("rules:\n  - {name: a, rate: 1/1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(newMemstore(t), p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = tiers.Watch(ctx, "policy.yaml", l, tiers.WithWatchInterval(0), nil)
	if err == nil || !strings.Contains(err.Error(), "WithWatchInterval") || !strings.Contains(err.Error(), "nil") {
		t.Fatalf("Watch = %v, want errors naming WithWatchInterval and the nil option", err)
	}
}
