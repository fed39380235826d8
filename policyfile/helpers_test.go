package policyfile_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

func newMemstore(t testing.TB, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	s, err := memstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mustLimiter returns a Limiter on s with the rate-limit policy y.
func mustLimiter(t testing.TB, s quota.Store, y string) *tiers.Limiter {
	t.Helper()
	p, err := tiers.Load([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(s, p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// admit runs one request through l and releases it.
func admit(t *testing.T, l *tiers.Limiter, r *floodgate.Request) floodgate.Decision {
	t.Helper()
	d, done, err := l.Admit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if done != nil {
		done(floodgate.Result{})
	}
	return d
}
