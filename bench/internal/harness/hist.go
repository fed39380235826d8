package harness

import (
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: values below 2^(subBits+1) ns are
// recorded exactly, larger ones in 2^subBits buckets per power of two, so a
// reported quantile is within 1/2^subBits (0.8%) of the true sample.
const (
	subBits    = 7
	subCount   = 1 << subBits
	numBuckets = (64-subBits-1)*subCount + 2*subCount
)

// Histogram records durations without allocating. The zero value is ready to
// use. It is not safe for concurrent use: give each goroutine its own and
// Merge them.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    uint64
	max    uint64
}

func bucketOf(v uint64) int {
	if v < 2*subCount {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1
	return e*subCount + int(v>>uint(e))
}

// bucketBounds returns the smallest and largest value recorded in bucket i.
func bucketBounds(i int) (lo, hi uint64) {
	if i < 2*subCount {
		return uint64(i), uint64(i)
	}
	e := i/subCount - 1
	m := uint64(i - e*subCount)
	return m << uint(e), (m+1)<<uint(e) - 1
}

// Record adds one sample. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d)
	}
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += v
	if v > h.max {
		h.max = v
	}
}

// Merge adds every sample of o to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	if o.max > h.max {
		h.max = o.max
	}
}

// Count is the number of samples recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest sample recorded.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the mean of the samples, 0 when there are none.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}

// Quantile returns the q-quantile (0 < q <= 1) of the samples: the value of
// the sample of rank ceil(q*n), to within the histogram's precision (the
// midpoint of its bucket, never above Max). It returns 0 when there are no
// samples.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if float64(rank) < q*float64(h.n) {
		rank++
	}
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketBounds(i)
			v := lo + (hi-lo)/2
			return time.Duration(min(v, h.max))
		}
	}
	return time.Duration(h.max)
}
