package main

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/floodgate-go/floodgate/bench/internal/child"
)

// TestMain lets the test binary be the service: startChild starts
// os.Executable() with -serve, which here is this binary.
func TestMain(m *testing.M) {
	child.ServeIfAsked(serveFlag, serve)
	os.Exit(m.Run())
}

// TestBadFlags checks that every mistake is refused before anything runs.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"overload", "-variant", "gpu"},
		{"overload", "-fixed", "0"},
		{"overload", "-overload", "0.5"},
		{"overload", "-rounds", "0"},
	} {
		var out bytes.Buffer
		if _, err := run(context.Background(), args, &out); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
