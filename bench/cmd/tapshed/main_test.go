package main

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/bench/internal/child"
)

// TestMain lets the test binary be the service: run starts this binary
// with serveFlag, as the command does.
func TestMain(m *testing.M) {
	child.ServeIfAsked(serveFlag, serve)
	os.Exit(m.Run())
}

// Bad flags are named; a short run floods both placements, every call
// refused without reaching the handler, and prints the ratio.
func TestTapshedFlagsAndRun(t *testing.T) {
	for _, bad := range [][]string{{"-calls", "0"}, {"-rounds", "0"}, {"-conc", "0"}, {"-size", "-1"}} {
		if err := run(append([]string{"tapshed"}, bad...), io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	var out strings.Builder
	if err := run([]string{"tapshed", "-calls", "200", "-rounds", "1", "-size", "1024", "-conc", "4"}, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"interceptor", "tap", "tap/interceptor"} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in the output:\n%s", want, s)
		}
	}
	if strings.Contains(s, "reached the handler") {
		t.Errorf("a refused call reached the handler:\n%s", s)
	}
}
