package main

import (
	"bytes"
	"context"
	"os"
	"testing"
)

// TestMain lets the test binary be the service: startChild starts
// os.Executable() with -serve, which here is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == serveFlag {
		if err := serve(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
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
