package demo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/demo"
)

func TestParseFault(t *testing.T) {
	for in, want := range map[string]demo.Fault{
		"kill@8s":         {Kind: demo.FaultKill, At: 8 * time.Second},
		"pause@8s:3s":     {Kind: demo.FaultPause, At: 8 * time.Second, For: 3 * time.Second},
		"kill@1.5s:500ms": {Kind: demo.FaultKill, At: 1500 * time.Millisecond, For: 500 * time.Millisecond},
		"pause@0s":        {Kind: demo.FaultPause},
	} {
		got, err := demo.ParseFault(in)
		if err != nil || got != want {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if err == nil {
			if back, err := demo.ParseFault(got.String()); err != nil || back != got {
				t.Errorf("ParseFault(%q.String() = %q) = %+v, %v", in, got.String(), back, err)
			}
		}
	}
	for in, why := range map[string]string{
		"":             "no @",
		"kill":         "missing @AT",
		"restart@8s":   `unknown kind "restart"`,
		"kill@8":       `AT "8" is not a duration`,
		"kill@-1s":     "negative",
		"pause@8s:":    `FOR "" is not a duration`,
		"pause@8s:0s":  "must be > 0",
		"pause@8s:-1s": "must be > 0",
	} {
		_, err := demo.ParseFault(in)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "kill@AT[:FOR] or pause@AT[:FOR]") {
			t.Errorf("ParseFault(%q) = %v; want an error saying %q and the syntax", in, err, why)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	f := func(s string) *demo.Fault {
		f, err := demo.ParseFault(s)
		if err != nil {
			t.Fatal(err)
		}
		return &f
	}
	for _, c := range []struct {
		cfg  demo.Config
		want string // "" for valid
	}{
		{demo.Config{}, ""},
		{demo.Config{Duration: 10 * time.Second, Fault: f("kill@8s:2s")}, ""},
		{demo.Config{Fault: f("pause@19s")}, ""}, // 20s by default
		{demo.Config{Duration: 500 * time.Millisecond}, "shorter than 1s"},
		{demo.Config{Duration: 5 * time.Second, Fault: f("kill@5s")}, "not before the end of the 5s run"},
		{demo.Config{Duration: 5 * time.Second, Fault: f("pause@4s:2s")}, "ends at 6s, after the end of the 5s run"},
		{demo.Config{RedisURL: "redis://127.0.0.1:1", Fault: f("kill@1s")}, "unset REDIS_URL"},
	} {
		err := c.cfg.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: Validate() = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestFaultWithoutRedisServer: without redis-server on PATH a fault run
// fails at once and says what to install.
func TestFaultWithoutRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	f, _ := demo.ParseFault("kill@1s")
	_, err := demo.Run(context.Background(), demo.Config{Duration: 2 * time.Second, Fault: &f})
	if err == nil || !strings.Contains(err.Error(), "redis-server") || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("Run without redis-server: %v; want an error naming redis-server and make deps", err)
	}
}
