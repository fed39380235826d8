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

// LateSink is a quota.LateAnswers that records the buckets it is given
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
