//go:build system

package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// The differential test end to end: envoyproxy/ratelimit and
// floodgate-rls (each built once by go run and then found in the go build
// cache), each on its own redis-server, answer every sequence; any
// difference of a kind that is not documented fails, printed with its
// call and both answers.
//
// Bound: none on time. What it compares is fixed by the configurations
// and the sequences (149 calls, answered one at a time), not by how fast
// they run; the only clock in it is the minute the fixed windows count
// in: the run starts with at least 10 s of the minute left and its calls
// take under a second of it on a loaded 2-core machine (0.6 to 0.9 s
// with two CPU-bound processes beside them, at load 20), and a run that
// still crosses a minute is run again, once. The services are waited for (60 s each, an
// answer to a probe call), not slept for.
func TestDifferential(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"rls", "-diff"}, &out, &errb)
	t.Logf("go run . -diff (in bench/rls):\n%s", out.String())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

// The harness finds no difference between two envoyproxy/ratelimit
// instances on every configuration and sequence (the refused ones too):
// window alignment, the sequences and the comparison are sound.
//
// Bound: none on time, as TestDifferential: no difference at all, every
// sequence run, whatever the machine's load.
func TestDifferentialSelf(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"rls", "-diff-self"}, &out, &errb)
	o := out.String()
	if code != 0 || !strings.Contains(o, "differences by kind:\n  none\n") || !strings.Contains(o, "(0 refused by translate); sequences run: "+strconv.Itoa(len(diffSeqs))+" of ") {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), o)
	}
}
