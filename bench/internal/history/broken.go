package history

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/quota"
)

// Fault is how a Broken store breaks the store contract.
type Fault uint8

// Faults.
const (
	// Skip answers every n-th take "allowed" without sending it, so it
	// charges nothing (remaining reported as the capacity minus the
	// cost).
	Skip Fault = iota + 1
	// Split sends every n-th take one bucket at a time, so a take denied
	// by one bucket has still charged the buckets that allowed it: not all
	// or nothing.
	Split
)

// ParseFault returns the fault named s ("skip" or "split").
func ParseFault(s string) (Fault, error) {
	switch s {
	case "skip":
		return Skip, nil
	case "split":
		return Split, nil
	}
	return 0, fmt.Errorf("unknown fault %q (want skip or split)", s)
}

// Broken is a deliberately broken quota.Store, for showing that the
// checker catches a store that breaks the contract. Never use it to
// decide anything.
type Broken struct {
	inner quota.Store
	fault Fault
	every int64
	n     atomic.Int64
}

// NewBroken returns inner broken by fault on every n-th take (n >= 1).
func NewBroken(inner quota.Store, fault Fault, n int) *Broken {
	return &Broken{inner: inner, fault: fault, every: int64(max(1, n))}
}

// Unwrap returns the wrapped store (see quota.Layers).
func (b *Broken) Unwrap() quota.Store { return b.inner }

// Take implements quota.Store, broken on every n-th take.
func (b *Broken) Take(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	if b.n.Add(1)%b.every != 0 {
		return b.inner.Take(ctx, buckets, res)
	}
	switch b.fault {
	case Skip:
		for i := range buckets {
			c := buckets[i].Limit.Capacity()
			res[i] = quota.Result{Allowed: true, Limit: c, Remaining: max(0, c-buckets[i].Cost)}
		}
		return true, nil
	case Split:
		all := true
		for i := range buckets {
			ok, err := b.inner.Take(ctx, buckets[i:i+1], res[i:i+1])
			if err != nil {
				return false, err
			}
			all = all && ok
		}
		return all, nil
	}
	return b.inner.Take(ctx, buckets, res)
}
