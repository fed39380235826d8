package shedder_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder"
)

// Every bad argument or option makes its constructor return an error that
// names it ("shedder: <Option>: …"), and no value.
func TestConstructorErrors(t *testing.T) {
	t.Parallel()
	newShedder := func(capacity int64, opts ...shedder.Option) func() error {
		return func() error {
			s, err := shedder.New(capacity, opts...)
			if s != nil {
				t.Errorf("New returned a Shedder with error %v", err)
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
	t.Parallel()
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
