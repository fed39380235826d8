package memstore

import (
	"context"
	"hash/maphash"
	"math/bits"

	"github.com/floodgate-go/floodgate/quota"
)

var _ quota.Resetter = (*Store)(nil)

// Reset implements quota.Resetter: it deletes the state of each bucket's
// Key, so the bucket's next Take finds it full. ctx is not consulted.
func (s *Store) Reset(_ context.Context, buckets []quota.Bucket) error {
	nsh := uint64(len(s.shards))
	for i := range buckets {
		key := buckets[i].Key
		h := maphash.String(s.seed, key) & hashMask
		n, _ := bits.Mul64(h, nsh)
		sh := &s.shards[n]
		sh.mu.Lock()
		if e := sh.t.get(h, key); e != nil {
			sh.t.remove(e)
		}
		sh.mu.Unlock()
	}
	return nil
}
