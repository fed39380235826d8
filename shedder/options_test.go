package shedder_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder"
)

// Every bad argument or option makes its constructor return an error that
// names it ("shedder: <Option>: …"), and no value.
func TestConstructorErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	newShedder := func(capacity int64, opts ...shedder.Option) func() error {
		return func() error {
			s, err := shedder.New(capacity, opts...)
			if s != nil {
				t.Errorf("New returned a Shedder with error %v", err)
			}
			return err
		}
	}
	newFleet := func(client redis.UniversalClient, capacity int64, opts ...shedder.FleetOption) func() error {
		return func() error {
			f, err := shedder.NewFleet(client, capacity, opts...)
			if f != nil {
				t.Errorf("NewFleet returned a Fleet with error %v", err)
			}
			return err
		}
	}
	for _, tc := range []struct {
		name string
		new  func() error
		want string
	}{
		{"capacity", newShedder(0), "shedder: capacity 0 must be at least 1"},
		{"nil option", newShedder(10, nil), "shedder: nil Option"},
		{"threshold above 1", newShedder(10, shedder.WithThresholds(0.5, 0.6, 1.2)), "shedder: WithThresholds: write threshold 1.2"},
		{"threshold zero", newShedder(10, shedder.WithThresholds(0, 0.6, 0.7)), "shedder: WithThresholds: test threshold 0"},
		{"threshold NaN", newShedder(10, shedder.WithThresholds(0.5, math.NaN(), 0.7)), "shedder: WithThresholds: read threshold NaN"},
		{"misordered", newShedder(10, shedder.WithThresholds(0.9, 0.8, 0.7)), "shedder: WithThresholds: thresholds test 0.9, read 0.8, write 0.7 must satisfy test <= read <= write"},
		{"band", newShedder(10, shedder.WithHysteresis(0.6, 0)), "shedder: WithHysteresis: hysteresis band 0.6"},
		{"hold", newShedder(10, shedder.WithHysteresis(0.1, -time.Second)), "shedder: WithHysteresis: hysteresis hold -1s"},
		{"retry", newShedder(10, shedder.WithRetryAfter(0)), "shedder: WithRetryAfter: retry-after 0s"},
		{"default", newShedder(10, shedder.WithDefaultPriority(floodgate.PriorityUnspecified)), "shedder: WithDefaultPriority: default priority unspecified"},
		{"clock", newShedder(10, shedder.WithClock(nil)), "shedder: WithClock: clock is nil"},
		{"policy", newShedder(10, shedder.WithPolicy("")), "shedder: WithPolicy: policy name is empty"},

		{"fleet client", newFleet(nil, 10), "shedder: redis client is nil"},
		{"fleet capacity", newFleet(c, -1), "shedder: fleet capacity -1 must be at least 1"},
		{"nil fleet option", newFleet(c, 10, nil), "shedder: nil FleetOption"},
		{"fleet band", newFleet(c, 10, shedder.WithFleetHysteresis(-0.1, 0)), "shedder: WithFleetHysteresis: hysteresis band -0.1"},
		{"fleet retry", newFleet(c, 10, shedder.WithFleetRetryAfter(-time.Second)), "shedder: WithFleetRetryAfter: retry-after -1s"},
		{"fleet default", newFleet(c, 10, shedder.WithFleetDefaultPriority(9)), "shedder: WithFleetDefaultPriority: default priority"},
		{"fleet clock", newFleet(c, 10, shedder.WithFleetClock(nil)), "shedder: WithFleetClock: clock is nil"},
		{"fleet policy", newFleet(c, 10, shedder.WithFleetPolicy("")), "shedder: WithFleetPolicy: policy name is empty"},
		{"reserve", newFleet(c, 10, shedder.WithFleetReserve(1)), "shedder: WithFleetReserve: reserve 1 is out of range"},
		{"instance", newFleet(c, 10, shedder.WithFleetInstanceID("")), `shedder: WithFleetInstanceID: instance ID ""`},
		{"key", newFleet(c, 10, shedder.WithFleetKey("")), "shedder: WithFleetKey: fleet key is empty"},
		{"sync order", newFleet(c, 10, shedder.WithFleetSync(time.Second, time.Second, time.Second)), "shedder: WithFleetSync: sync interval 1s and ttl 1s must satisfy 0 < interval < ttl"},
		{"sync ttl", newFleet(c, 10, shedder.WithFleetSync(time.Second, 1500*time.Microsecond+time.Second, time.Second)), "shedder: WithFleetSync: sync ttl 1.0015s is not a whole number of milliseconds"},
		{"sync timeout", newFleet(c, 10, shedder.WithFleetSync(time.Second, 2*time.Second, 0)), "shedder: WithFleetSync: sync timeout 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.new()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v does not mention %q", err, tc.want)
			}
		})
	}
}

// A constructor reports every bad option at once.
func TestConstructorJoinsErrors(t *testing.T) {
	_, err := shedder.New(0, shedder.WithRetryAfter(0), nil, shedder.WithPolicy(""))
	for _, want := range []string{"capacity 0", "WithRetryAfter", "nil Option", "WithPolicy"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 4 {
		t.Errorf("error joins %d errors, want 4", n)
	}
}

// The settings both constructors take behave alike under either name.
func TestFleetSharedOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	f, err := shedder.NewFleet(c, 10,
		shedder.WithFleetPolicy("fleet"),
		shedder.WithFleetRetryAfter(3*time.Second),
		shedder.WithFleetDefaultPriority(floodgate.PriorityTest),
		shedder.WithFleetHysteresis(0, 0),
		shedder.WithFleetReserve(0.5),
	)
	if err != nil {
		t.Fatal(err)
	}
	if start, stop := f.Threshold(); start != 5 || stop != 5 {
		t.Fatalf("threshold %d/%d, want 5/5 (reserve 50%%, no band)", start, stop)
	}
	var dones []floodgate.Done
	for range 5 {
		_, done, _ := f.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
		dones = append(dones, done)
	}
	d, done, _ := f.Admit(ctx, &floodgate.Request{})
	want := floodgate.Decision{Stage: floodgate.StageShedder, Source: floodgate.SourceShedder,
		Policy: "fleet", Limit: 10, Remaining: 5, RetryAfter: 3 * time.Second, Priority: floodgate.PriorityTest}
	if done != nil || d != want {
		t.Fatalf("decision %+v, want %+v", d, want)
	}
	endAll(dones)
}
