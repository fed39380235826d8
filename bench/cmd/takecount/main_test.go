package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// Without callgrind (-pid 0) it makes its takes, every one charged (a
// denied take is an error), in calls of up to -batch takes, and says so.
func TestTakesWithoutCounting(t *testing.T) {
	srv := redistest.Start(t)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"takecount", "-addr", srv.Addr(), "-n", "44", "-levels", "2", "-batch", "4"}, &out); err != nil {
		t.Fatal(err)
	}
	var takes, levels, calls int
	var per float64
	if _, err := fmt.Sscanf(out.String(), "takes %d of %d token buckets in %d EVALSHA (%f a call)", &takes, &levels, &calls, &per); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	// At most 4 takes a call: 11 calls at least, one a take at most.
	if takes != 44 || levels != 2 || calls < 11 || calls > 44 {
		t.Fatalf("output %q: want 44 takes of 2 buckets in 11 to 44 calls", out.String())
	}
}

// Every bad flag is named.
func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-addr", "10.0.0.7:6379"}, "not a loopback address"},
		{[]string{"-pid", "-1"}, "-pid -1"},
		{[]string{"-n", "0"}, "-n 0"},
		{[]string{"-levels", "9"}, "-levels 9"},
		{[]string{"-batch", "0"}, "-batch 0"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		_, err := parseFlags(append([]string{"takecount"}, tc.args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to name %q", tc.args, err, tc.want)
		}
	}
}
