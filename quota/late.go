package quota

// LateAnswersKey is the context key under which a caller of Take puts a
// LateAnswers (ctx.Value(LateAnswersKey)). A store that honours it (see
// LateAnswers) reads it only when a take's context ends after the take was
// sent, so a caller pays for it only on that path; wrappers pass it on
// with the context, unchanged.
var LateAnswersKey any = &lateKey{}

type lateKey struct{}

// LateAnswers receives the answer to a take whose caller stopped waiting
// after the store had sent it: a take abandoned at the caller's deadline
// is usually applied all the same (a paused Redis runs what was queued on
// its sockets when it resumes; a loaded one answers late), and without its
// answer the caller cannot know what was charged. Package fallback uses
// it to match a take decided locally with what the store did.
//
// A store that honours it, when its Take is about to return the context's
// error for a take that was sent (or queued to be sent) and whose answer
// it will still learn, calls Late with the take's buckets (in a slice of
// its own, which the receiver may keep) before Take returns, and later calls the function Late returned exactly once, from
// another goroutine, with what Take would have returned: whether the take
// was allowed, a result per bucket in the order Late was given them (a
// slice of the store's own; nil when the error is not) and the error. Take itself still returns the context's error. A take the store
// will never learn the answer of gets no Late call. The store keeps no
// reference to the caller's buckets or results after Take returns.
//
// A store that calls Late for every take it abandons after sending says so
// with an AnswersLate() bool method reporting true (package
// tiers/redisstore with batching, its default, on a standalone,
// Sentinel-managed or Cluster Redis); a caller looks for it along Layers,
// as for every capability.
type LateAnswers interface {
	Late(buckets []Bucket) func(allowed bool, res []Result, err error)
}
