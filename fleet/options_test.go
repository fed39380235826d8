package fleet_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// A client that is never dialled: New does no I/O.
var idle redis.UniversalClient = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})

func TestOptionErrors(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", fleet.MaxInstanceIDLength+1)
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   []fleet.Option
		want   string
	}{
		{"nil client", nil, nil, "fleet: redis client is nil (only WithStatic works without one)"},
		{"nil option", idle, []fleet.Option{nil}, "fleet: nil Option"},
		{"empty key", idle, []fleet.Option{fleet.WithKey("")}, "fleet: WithKey: key is empty"},
		{"empty ID", idle, []fleet.Option{fleet.WithInstanceID("")}, "fleet: WithInstanceID: ID of 0 bytes must be 1 to 200 bytes"},
		{"long ID", idle, []fleet.Option{fleet.WithInstanceID(long)}, "fleet: WithInstanceID: ID of 201 bytes must be 1 to 200 bytes"},
		{"zero interval", idle, []fleet.Option{fleet.WithHeartbeat(0, time.Second)}, "fleet: WithHeartbeat: interval 0s must be at least 1ms"},
		{"sub-ms interval", idle, []fleet.Option{fleet.WithHeartbeat(time.Microsecond, time.Second)}, "fleet: WithHeartbeat: interval 1µs must be at least 1ms"},
		{"ttl = interval", idle, []fleet.Option{fleet.WithHeartbeat(time.Second, time.Second)}, "fleet: WithHeartbeat: ttl 1s must be longer than interval 1s"},
		{"ttl < interval", idle, []fleet.Option{fleet.WithHeartbeat(time.Second, 500*time.Millisecond)}, "fleet: WithHeartbeat: ttl 500ms must be longer than interval 1s"},
		{"ttl not whole ms", idle, []fleet.Option{fleet.WithHeartbeat(time.Second, 1500500*time.Microsecond)}, "fleet: WithHeartbeat: ttl 1.5005s must be whole milliseconds"},
		{"zero timeout", idle, []fleet.Option{fleet.WithTimeout(0)}, "fleet: WithTimeout: 0s must be > 0"},
		{"negative timeout", idle, []fleet.Option{fleet.WithTimeout(-time.Second)}, "fleet: WithTimeout: -1s must be > 0"},
		{"nil clock", idle, []fleet.Option{fleet.WithClock(nil)}, "fleet: WithClock: clock is nil"},
		{"zero static", idle, []fleet.Option{fleet.WithStatic(0)}, "fleet: WithStatic: count 0 must be >= 1"},
		{"negative static", nil, []fleet.Option{fleet.WithStatic(-2)}, "fleet: WithStatic: count -2 must be >= 1\nfleet: redis client is nil (only WithStatic works without one)"},
		{"nil logger", idle, []fleet.Option{fleet.WithLogger(nil)}, "fleet: WithLogger: logger is nil"},
		{"every error named", nil, []fleet.Option{fleet.WithKey(""), nil, fleet.WithHeartbeat(time.Second, 0), fleet.WithLogger(nil)},
			"fleet: WithKey: key is empty\nfleet: nil Option\nfleet: WithHeartbeat: ttl 0s must be longer than interval 1s\nfleet: WithLogger: logger is nil\nfleet: redis client is nil (only WithStatic works without one)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := fleet.New(tc.client, tc.opts...)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("New error = %v\nwant %s", err, tc.want)
			}
			if m != nil {
				t.Fatalf("New returned %v with an error", m)
			}
		})
	}
}

func TestDefaultsAndGoodOptions(t *testing.T) {
	t.Parallel()
	m, err := fleet.New(idle)
	if err != nil {
		t.Fatal(err)
	}
	if m.Key() != fleet.DefaultKey || m.Key() != "fg:fleet:{members}" {
		t.Errorf("key = %q, want %q", m.Key(), fleet.DefaultKey)
	}
	if iv, ttl, to := m.Settings(); iv != fleet.DefaultInterval || ttl != fleet.DefaultTTL || to != fleet.DefaultInterval {
		t.Errorf("settings = %s %s %s, want %s %s %s", iv, ttl, to, fleet.DefaultInterval, fleet.DefaultTTL, fleet.DefaultInterval)
	}
	other, err := fleet.New(idle)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.ID()) != 26 || m.ID() == other.ID() {
		t.Errorf("random IDs %q and %q: want two different 26-character IDs", m.ID(), other.ID())
	}
	if m.Count() != 1 || !m.Stale() || m.Errors() != 0 {
		t.Errorf("before any beat: Count %d Stale %v Errors %d, want 1 true 0", m.Count(), m.Stale(), m.Errors())
	}

	m, err = fleet.New(idle,
		fleet.WithKey("svc:{a}"), fleet.WithInstanceID(strings.Repeat("i", fleet.MaxInstanceIDLength)),
		fleet.WithHeartbeat(time.Millisecond, 2*time.Millisecond), fleet.WithTimeout(time.Minute),
		fleet.WithClock(clock.New(time.Time{})), fleet.WithLogger(slog.Default()))
	if err != nil {
		t.Fatal(err)
	}
	if iv, ttl, to := m.Settings(); m.Key() != "svc:{a}" || iv != time.Millisecond || ttl != 2*time.Millisecond || to != time.Minute {
		t.Errorf("key %q settings %s %s %s", m.Key(), iv, ttl, to)
	}
	// The timeout follows the interval unless set.
	m, err = fleet.New(idle, fleet.WithHeartbeat(300*time.Millisecond, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, to := m.Settings(); to != 300*time.Millisecond {
		t.Errorf("default timeout = %s, want the interval 300ms", to)
	}
}
