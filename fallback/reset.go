package fallback

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate/quota"
)

var _ quota.Resetter = (*Store)(nil)

// CanReset reports whether the primary store can reset (quota.Resets).
func (s *Store) CanReset() bool { return quota.Resets(s.primary) }

// Reset implements quota.Resetter with the primary's Reset, which it
// calls whatever the breaker's state (an operator's reset is not a
// request's decision, and is not counted against the breaker), and then
// drops this store's local limiters of the buckets' keys, so a local
// decision made later starts again from what the primary next says, or
// from full. A primary without Reset is an error naming its type.
func (s *Store) Reset(ctx context.Context, buckets []quota.Bucket) error {
	r, ok := s.primary.(quota.Resetter)
	if !ok {
		return fmt.Errorf("fallback: Reset: the primary store %T is not a quota.Resetter", s.primary)
	}
	if err := r.Reset(ctx, buckets); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range buckets {
		if el, ok := s.local.byKey[buckets[i].Key]; ok {
			delete(s.local.byKey, buckets[i].Key)
			s.local.ll.Remove(el)
		}
	}
	return nil
}
