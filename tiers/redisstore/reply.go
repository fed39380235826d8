package redisstore

import (
	"errors"
	"fmt"
)

// take.lua replies with integers (see its header): the time it used, then
// per take a charged flag and, per bucket, remaining and reset when the
// take charged (flag 1; flag 2, a take with a bucket that may wait: and
// the wait; flag -g, a take that granted its partial-grant buckets g
// units), or allowed, remaining, reset and retry-after when it denied.
// Mode "p" has six integers per bucket: allowed, remaining, reset,
// retry-after (an allowed bucket's wait), then remaining and reset before
// the charge.

// takeLen returns the length of the part of a reply for a take of n
// buckets that starts with flag, and how many integers each bucket has.
func takeLen(flag int64, n int, pre bool) (total, per int) {
	switch {
	case pre:
		per = 6
	case flag == 1, flag < 0: // charged; < 0: a partial grant of -flag units
		per = 2
	case flag == 2:
		per = 3
	default:
		per = 4
	}
	return 1 + per*n, per
}

// bucketReply is one bucket's values in a take.lua reply.
type bucketReply struct {
	allowed                 bool
	remaining, reset, retry int64 // retry < 0: never
	remaining0, reset0      int64 // before the charge (mode "p")
	wait                    int64 // units booked ahead (flag 2; mode "p": retry of an allowed bucket)
}

// bucketAt decodes the j-th bucket of a take's part of a reply, whose
// buckets have per integers each.
func bucketAt(seg []int64, per, j int) bucketReply {
	v := seg[1+per*j:]
	switch per {
	case 2:
		return bucketReply{allowed: true, remaining: v[0], reset: v[1]}
	case 3:
		return bucketReply{allowed: true, remaining: v[0], reset: v[1], wait: v[2]}
	}
	b := bucketReply{allowed: v[0] == 1, remaining: v[1], reset: v[2], retry: v[3]}
	if per == 6 {
		b.remaining0, b.reset0 = v[4], v[5]
	}
	return b
}

// takePart checks that seg holds exactly one take of n buckets and returns
// the integers each bucket has.
func takePart(seg []int64, n int, pre bool) (int, error) {
	if len(seg) == 0 {
		return 0, fmt.Errorf("redisstore: take.lua replied no values for a take of %d buckets", n)
	}
	total, per := takeLen(seg[0], n, pre)
	if len(seg) != total {
		return 0, fmt.Errorf("redisstore: take.lua replied %d values for a take of %d buckets, want %d", len(seg), n, total)
	}
	return per, nil
}

// splitNow splits a one-take reply into the time the script used and the
// take's part.
func splitNow(vals []int64) (int64, []int64, error) {
	if len(vals) == 0 {
		return 0, nil, errors.New("redisstore: take.lua replied nothing")
	}
	return vals[0], vals[1:], nil
}
