package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestBadFlags checks that every mistake is refused, naming the flag,
// before any replica starts.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"orca", "-capacity", "1"}, "-capacity 1"},
		{[]string{"orca", "-service", "0s"}, "-service 0s"},
		{[]string{"orca", "-load", "0"}, "-load 0"},
		{[]string{"orca", "-rounds", "0"}, "-rounds 0"},
		{[]string{"orca", "-arrivals", "bursty"}, `-arrivals "bursty"`},
		{[]string{"orca", "-only", "p2c"}, `-only "p2c"`},
		{[]string{"orca", "extra"}, `unexpected argument "extra"`},
	} {
		var out bytes.Buffer
		_, err := run(context.Background(), c.args, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %s", c.args, err, c.want)
		}
		if out.Len() != 0 {
			t.Errorf("%v: printed %q before refusing", c.args, out.String())
		}
	}
}
