package tiers_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// newMemstore returns an in-process store configured by opts, failing the
// test if memstore.New refuses them.
func newMemstore(t testing.TB, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	s, err := memstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// failingStore fails every Take with err, as a store that is down does.
type failingStore struct{ err error }

func (f failingStore) Take(context.Context, []quota.Bucket, []quota.Result) (bool, error) {
	return false, f.err
}
