package localfirst

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate/quota"
)

var _ quota.Resetter = (*Store)(nil)

// CanReset reports whether the exact store beneath can reset
// (quota.Resets).
func (s *Store) CanReset() bool { return quota.Resets(s.exact) }

// Reset implements quota.Resetter with the exact store's Reset: the
// store's buckets are restored to full. What this instance holds locally
// stays: units already leased are still spent here (a leased rule may
// admit up to one lease more than the fresh bucket), and async hits not
// yet reported are charged to the fresh bucket at the next report. A
// store beneath without Reset is an error naming its type.
func (s *Store) Reset(ctx context.Context, buckets []quota.Bucket) error {
	r, ok := s.exact.(quota.Resetter)
	if !ok {
		return fmt.Errorf("localfirst: Reset: the store %T is not a quota.Resetter", s.exact)
	}
	return r.Reset(ctx, buckets)
}
