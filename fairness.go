package floodgate

// Fairness shares the room of each priority among the callers of a stage
// that refuses requests under overload (the shedders, a concurrency wait
// queue), so that one caller's surge takes no room from the others of the
// same priority. Priorities stay in force: fairness never lets a request
// in that a more important priority's shedding refuses.
//
// A caller's share is the priority's room (the in-flight count from which
// the shedder refuses it) times the caller's weight, over the weights of
// the callers with requests in flight. In a shedder, while the priority is
// refused, a caller holding less than its share is still let in, up to the
// next priority's threshold, so the quiet callers keep their room; a caller
// holding more is refused first. A caller may hold up to 1.5 times its
// share, so that random arrivals at its share are not refused for a
// passing peak; once a third of its recent requests are refused for want
// of share (its demand exceeds its share), it is held to its share, also
// while the stage has room, until its demand falls back. When nobody
// exceeds a share the stage decides as without fairness: the room others
// do not use is not kept idle. In a wait queue, a freed slot goes to the
// waiting request whose caller holds the fewest slots for its weight, and
// a full queue refuses the waiter whose caller holds the most.
//
// The counts are per stage and exact, and take memory for the callers in
// flight only, whatever the number of callers.
type Fairness struct {
	// By names the identity that tells callers apart: "tenant", "user",
	// "api_key" or "ip" (Request.Identity). Requests without it count as
	// one caller. The transport must fill it: package guard refuses a
	// Fairness by an identity its identity: section does not give.
	By string
	// Weights gives a plan tier (Request.Tier) the weight of its callers'
	// shares: with {free: 1, pro: 4}, a pro tenant's share is four times a
	// free one's. A tier not listed, and a request without a tier, weighs
	// 1. Each weight must be a number in (0, 1e6]; nil weighs every caller
	// 1.
	Weights map[string]float64
}
