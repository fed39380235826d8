package redisstore

import "github.com/floodgate-go/floodgate/quota"

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key's hash tag, modulo 16384. The hash tag is the part between the first
// '{' and the first '}' after it, when that part is not empty; otherwise
// the whole key is hashed. This is the rule Redis and go-redis apply.
func Slot(key string) int {
	return int(crc16(hashTag(key)) & 16383)
}

// CacheHits returns how many takes the over-limit cache answered without
// Redis. (Outside tests, count the Results whose Source is
// floodgate.SourceCache; package otel does.)
func (s *Store) CacheHits() int64 {
	if s.cache == nil {
		return 0
	}
	return s.cache.hits.Load()
}

// CacheLen returns the number of entries in the over-limit cache.
func (s *Store) CacheLen() int {
	if s.cache == nil {
		return 0
	}
	return s.cache.len()
}

// Batched reports whether s sends takes through the batcher.
func Batched(s *Store) bool { return s.batch != nil }

// LateSink is a lateanswer.Receiver that records the buckets it is given
// and sends each answer it is handed to Got.
type LateSink struct {
	Buckets []quota.Bucket
	Got     chan LateAnswer
}

// LateAnswer is one answer handed to a LateSink.
type LateAnswer struct {
	Allowed bool
	Res     []quota.Result
	Err     error
}

// Late records buckets and returns the function that sends the answer.
func (s *LateSink) Late(buckets []quota.Bucket) func(bool, []quota.Result, error) {
	s.Buckets = buckets
	return func(allowed bool, res []quota.Result, err error) { s.Got <- LateAnswer{allowed, res, err} }
}

// Queued returns how many calls wait in s's batcher for a flusher (0 when
// batching is off).
func Queued(s *Store) int {
	if s.batch == nil {
		return 0
	}
	return len(s.batch.ch)
}

// RetrierIdle reports whether s's retrier has no failed refund left to
// send again, none being sent: every refund handed to it applied, expired
// or was dropped (see the retrier's counts).
func RetrierIdle(s *Store) bool {
	s.retry.mu.Lock()
	defer s.retry.mu.Unlock()
	return !s.retry.running && len(s.retry.jobs) == 0
}

// RefundsLost returns how many failed refunds s's retrier gave up or
// dropped (their units stayed charged).
func RefundsLost(s *Store) int64 { return s.retry.expired.Load() + s.retry.dropped.Load() }

// Closing reports whether s's Close has begun (batching on): its flushers
// send what is queued and stop.
func Closing(s *Store) bool {
	if s.batch == nil {
		return false
	}
	select {
	case <-s.batch.quit:
		return true
	default:
		return false
	}
}
