// Package lateanswer is how a store hands over the answer to a take whose
// caller stopped waiting after the store had sent it: a take abandoned at
// the caller's deadline is usually applied all the same (a paused Redis
// runs what was queued on its sockets when it resumes; a loaded one
// answers late), and without its answer the caller cannot know what was
// charged. Package fallback is the caller that asks (it matches a take it
// decided locally with what the store did); package tiers/redisstore, with
// batching, is the store that answers; every store wrapper between them
// (package otel's) passes the take's context on unchanged.
//
// What it decides: the contract between the two, below. It is internal:
// a store of the user's answers no take late, and a wrapper of the user's
// needs nothing of it but to pass the context on.
//
// A caller of Take that wants late answers puts a Receiver in the take's
// context under Key (ctx.Value(Key)). A store that honours it reads it
// only when a take's context ends after the take was sent, so a caller
// pays for it only on that path; when its Take is about to return the
// context's error for a take that was sent (or queued to be sent) and
// whose answer it will still learn, it calls Late with the take's buckets
// (in a slice of its own, which the receiver may keep) before Take
// returns, and later calls the function Late returned exactly once, from
// another goroutine, with what Take would have returned: whether the take
// was allowed, a result per bucket in the order Late was given them (a
// slice of the store's own; nil when the error is not) and the error. Take
// itself still returns the context's error. A take the store will never
// learn the answer of gets no Late call. The store keeps no reference to
// the caller's buckets or results after Take returns.
//
// A store that calls Late for every take it abandons after sending says so
// with an AnswersLate() bool method reporting true; a caller looks for it
// along quota.Layers, as for every capability.
package lateanswer

import "github.com/floodgate-go/floodgate/quota"

// Key is the context key under which a caller of Take puts its Receiver.
var Key any = &key{}

type key struct{}

// Receiver receives the answers to takes a store abandoned after sending
// them; see the package documentation.
type Receiver interface {
	Late(buckets []quota.Bucket) func(allowed bool, res []quota.Result, err error)
}
