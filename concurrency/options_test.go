package concurrency_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/concurrency"
)

// Every bad option, or bad field of a cap description, makes New return an
// error that names it ("concurrency: <Option>: …"), and no Limiter.
func TestNewErrors(t *testing.T) {
	t.Parallel()
	perKey := func(p concurrency.PerKey) concurrency.Option { return concurrency.WithPerKey(p) }
	global := concurrency.WithGlobal(1)
	nine := func(add func(i int) concurrency.Option) []concurrency.Option {
		var opts []concurrency.Option
		for i := range 9 {
			opts = append(opts, add(i))
		}
		return opts
	}
	for _, tc := range []struct {
		name string
		opts []concurrency.Option
		want string
	}{
		{"nothing", nil, "concurrency: no cap configured"},
		{"nil option", []concurrency.Option{global, nil}, "concurrency: nil Option"},
		{"global", []concurrency.Option{concurrency.WithGlobal(0)}, "concurrency: WithGlobal: limit 0 must be >= 1"},
		{"global policy", []concurrency.Option{global, concurrency.WithGlobalPolicy("")}, "concurrency: WithGlobalPolicy: policy name is empty"},
		{"retry", []concurrency.Option{global, concurrency.WithRetryAfter(-1)}, "concurrency: WithRetryAfter: retry-after -1ns must be positive"},

		{"no name", []concurrency.Option{perKey(concurrency.PerKey{Cap: 1, Key: byUser})}, "concurrency: WithPerKey: PerKey.Name is empty"},
		{"colon", []concurrency.Option{perKey(concurrency.PerKey{Name: "a:b", Cap: 1, Key: byUser})}, `concurrency: WithPerKey: PerKey.Name "a:b" contains ':'`},
		{"dup", []concurrency.Option{global, perKey(concurrency.PerKey{Name: "concurrency", Cap: 1, Key: byUser})}, `concurrency: WithPerKey: cap name "concurrency" is used twice`},
		{"cap", []concurrency.Option{perKey(concurrency.PerKey{Name: "u", Key: byUser})}, `concurrency: WithPerKey: PerKey.Cap 0 must be >= 1 (cap "u")`},
		{"key", []concurrency.Option{perKey(concurrency.PerKey{Name: "u", Cap: 1})}, `concurrency: WithPerKey: PerKey.Key is nil (cap "u")`},
		{"maxkeys", []concurrency.Option{perKey(concurrency.PerKey{Name: "u", Cap: 1, Key: byUser, MaxKeys: -1})}, `concurrency: WithPerKey: PerKey.MaxKeys -1 is negative (cap "u")`},
		{"too many", nine(func(i int) concurrency.Option {
			return perKey(concurrency.PerKey{Name: string(rune('a' + i)), Cap: 1, Key: byUser})
		}), "concurrency: WithPerKey: 9 per-key caps, at most 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := concurrency.New(tc.opts...)
			if err == nil || l != nil {
				t.Fatalf("New = %v, %v; want an error", l, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// New reports every bad option at once.
func TestNewJoinsErrors(t *testing.T) {
	t.Parallel()
	_, err := concurrency.New(concurrency.WithGlobal(0), nil, concurrency.WithPerKey(concurrency.PerKey{Name: "u"}))
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 4 {
		t.Fatalf("error %v, want 4 joined errors (WithGlobal, nil Option, PerKey.Cap, PerKey.Key)", err)
	}
}

// Every bad field of an AdaptiveConfig makes NewAdaptive return an error
// that names it; the zero AdaptiveConfig is valid.
func TestNewAdaptiveErrors(t *testing.T) {
	t.Parallel()
	if _, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{}); err != nil {
		t.Fatalf("zero AdaptiveConfig: %v", err)
	}
	for _, tc := range []struct {
		cfg  concurrency.AdaptiveConfig
		want string
	}{
		{concurrency.AdaptiveConfig{Min: -1}, "min: -1 must be >= 1"},
		{concurrency.AdaptiveConfig{Initial: 5, Min: 6}, "initial: 5 must lie in [min 6, max 1000]"},
		{concurrency.AdaptiveConfig{Initial: 20, Max: 10}, "initial: 20 must lie in [min 1, max 10]"},
		{concurrency.AdaptiveConfig{Min: 20, Max: 10}, "max: 10 must be >= min 20"},
		{concurrency.AdaptiveConfig{Algorithm: 7}, "algorithm: 7 is not a known algorithm"},
		{concurrency.AdaptiveConfig{MaxSamples: -1}, "max_samples: -1 is negative"},
		{concurrency.AdaptiveConfig{Percentile: 1.5}, "percentile: 1.5 is out of range (0, 1]"},
		{concurrency.AdaptiveConfig{Backoff: 0.2}, "backoff: 0.2 is out of range [0.5, 1)"},
		{concurrency.AdaptiveConfig{Alpha: 6, Beta: 3}, "alpha: 6 and beta 3 must satisfy 1 <= alpha < beta"},
		{concurrency.AdaptiveConfig{ProbeEvery: -2}, "probe_every: -2 is negative"},
		{concurrency.AdaptiveConfig{Timeout: -1}, "timeout: -1ns is negative"},
		{concurrency.AdaptiveConfig{Window: -1}, "window: -1ns is negative"},
		{concurrency.AdaptiveConfig{MinSamples: -1}, "min_samples: -1 is negative"},
		{concurrency.AdaptiveConfig{Smoothing: 2}, "smoothing: 2 is out of range (0, 1]"},
		{concurrency.AdaptiveConfig{Tolerance: 0.5}, "tolerance: 0.5 must be a finite number >= 1"},
		{concurrency.AdaptiveConfig{LongWindow: -1}, "long_window: -1 is negative"},
		{concurrency.AdaptiveConfig{RetryAfter: -1}, "retry_after: -1ns is negative"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			a, err := concurrency.NewAdaptive(tc.cfg)
			if err == nil || a != nil || !strings.Contains(err.Error(), "concurrency: NewAdaptive: "+tc.want) {
				t.Errorf("NewAdaptive(%+v) = %v, %v; want an error mentioning %q", tc.cfg, a, err, tc.want)
			}
		})
	}
}
