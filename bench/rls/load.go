package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// phaseResult is what one measured phase did.
type phaseResult struct {
	ops, ok, over, errs int64
	firstErr            error
	lat                 []time.Duration // one per completed call
	elapsed             time.Duration
}

// clients dials conns connections to addr, whose calls use rawCodec.
func clients(addr string, conns int) ([]*grpc.ClientConn, func(), error) {
	var cs []*grpc.ClientConn
	closeAll := func() {
		for _, c := range cs {
			_ = c.Close()
		}
	}
	for range conns {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		cs = append(cs, c)
	}
	return cs, closeAll, nil
}

// runPhase drives c workers, each with one call in flight, back to back,
// for d or until maxOps calls, whichever comes first. Worker w draws
// principals from its own PCG stream (seed, w), so every contender sees
// the same sequence of calls; record keeps latencies (false: warm-up).
func runPhase(cls []*grpc.ClientConn, reqs []rawRequest, c int, d time.Duration, maxOps int64, seed uint64, record bool) phaseResult {
	var (
		stop    atomic.Bool
		started atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex
		res     phaseResult
	)
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	begin := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			client := cls[w%len(cls)]
			var (
				lat                 []time.Duration
				ops, ok, over, errs int64
				firstErr            error
			)
			if record {
				lat = make([]time.Duration, 0, 4096)
			}
			for !stop.Load() && started.Add(1) <= maxOps {
				req := &reqs[rng.IntN(len(reqs))]
				var resp rawResponse
				t0 := time.Now()
				err := client.Invoke(ctx, shouldRateLimit, req, &resp)
				el := time.Since(t0)
				ops++
				switch {
				case err != nil:
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				case resp.code == rlsv3.RateLimitResponse_OK:
					ok++
				default:
					over++
				}
				if record {
					lat = append(lat, el)
				}
			}
			mu.Lock()
			res.ops += ops
			res.ok += ok
			res.over += over
			res.errs += errs
			if res.firstErr == nil {
				res.firstErr = firstErr
			}
			res.lat = append(res.lat, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(begin)
	return res
}

// quantile returns the q-quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

// sortDurations sorts in place.
func sortDurations(ds []time.Duration) { slices.Sort(ds) }
