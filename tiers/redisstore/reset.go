package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
)

var _ quota.Resetter = (*Store)(nil)

// Reset implements quota.Resetter: it deletes each bucket's state key
// (the store's prefix + Key) in one pipeline (split by slot on a
// cluster), so the bucket's next Take finds it full, and drops the
// denials this store cached for those keys. Other processes' denial
// caches still answer "denied" for a key until the RetryAfter they
// cached passes (at most the bucket's period).
func (s *Store) Reset(ctx context.Context, buckets []quota.Bucket) error {
	if len(buckets) == 0 {
		return nil
	}
	if s.cache != nil {
		s.cache.forget(buckets)
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range buckets {
			p.Del(ctx, s.prefix+buckets[i].Key)
		}
		return nil
	})
	if s.cache != nil {
		s.cache.forget(buckets) // a take under way may have cached one meanwhile
	}
	if err != nil {
		return fmt.Errorf("redisstore: Reset of %d buckets: %w", len(buckets), err)
	}
	return nil
}

// forget drops every cached denial of the buckets' keys, whatever their
// limits, and makes takes under way drop the denials they bring back.
func (d *denialCache) forget(buckets []quota.Bucket) {
	keys := make(map[string]struct{}, len(buckets))
	for i := range buckets {
		keys[buckets[i].Key] = struct{}{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen.Add(1)
	for k := range d.m {
		if _, ok := keys[k.key]; ok {
			delete(d.m, k)
		}
	}
}
