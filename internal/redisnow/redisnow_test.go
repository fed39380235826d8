package redisnow_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/redisnow"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// The preamble takes now from ARGV[1] when it is a number, and from Redis
// TIME when it is "".
func TestScriptNow(t *testing.T) {
	c := redistest.Start(t).Client()
	ctx := context.Background()
	script := redisnow.Script("return now\n")

	at := time.Date(2030, 1, 2, 3, 4, 5, 678_900_000, time.UTC)
	got, err := script.Run(ctx, c, nil, redisnow.Arg(clock.New(at))).Int64()
	if err != nil || got != at.UnixMilli() {
		t.Fatalf("now with a clock = %d, %v; want %d", got, err, at.UnixMilli())
	}

	if arg := redisnow.Arg(nil); arg != "" {
		t.Fatalf("Arg(nil) = %q, want \"\"", arg)
	}
	before := time.Now().UnixMilli()
	got, err = script.Run(ctx, c, nil, redisnow.Arg(nil)).Int64()
	after := time.Now().UnixMilli()
	if err != nil || got < before-1 || got > after+1 {
		t.Fatalf("now from Redis TIME = %d, %v; want within [%d, %d]", got, err, before, after)
	}
}
