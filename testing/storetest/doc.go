// Package storetest is the conformance suite every quota.Store must pass:
// it decides what "implements quota.Store" means beyond the interface. The
// in-process store (tiers/memstore) and the Redis store (tiers/redisstore:
// standalone, Sentinel, Cluster, with and without batching) run the same
// step tables on fake time and must give the same decisions, to the
// microsecond, and the same errors.
//
// # What conforming means
//
// A conforming Store
//
//   - follows the arithmetic of the quota.Algorithm doc exactly, with time
//     taken from the injected clock (Vectors; every expected value there is
//     derived by hand from that doc, in comments beside it);
//   - reports, per bucket, Allowed and RetryAfter for that bucket alone, and
//     Remaining and Reset as the Take leaves the bucket: after the charge
//     when the Take allowed, untouched when it denied;
//   - is all or nothing: a Take that any bucket denies charges no bucket;
//   - denies a cost above the bucket's capacity with RetryAfter quota.Never;
//   - admits exactly the capacity under concurrent takes of one bucket;
//   - refuses bad input (res shorter than buckets, an empty key, the same
//     key twice, an invalid Limit, a negative cost, an unknown
//     OnStoreError) with exactly quota.ValidateTake's error, so a caller
//     sees the same text whichever store is behind it. An empty Take is
//     allowed;
//   - books units ahead for a bucket with MaxWait exactly as WaitVectors
//     say (token bucket and GCRA: a take that would deny admits when its
//     units arrive within MaxWait, charges now and reports Result.Wait, so
//     later takes queue behind it; beyond MaxWait it denies as without
//     it; a take another bucket denies books nothing), and refuses
//     MaxWait on the window algorithms with ValidateTake's error;
//   - grants partial takes (quota.Bucket.AtMost) exactly as PartialVectors
//     say: every AtMost bucket of a take is charged one grant, the least of
//     the cost and their remainings as they stand, all or nothing; with
//     nothing to give the take denies as a take of one unit would, and
//     Result.Granted reports the amount charged;
//   - counts a fixed window given as a calendar span (quota.Bucket.Span)
//     exactly as CalendarVectors say: by the span's start, with Reset and
//     RetryAfter its end (a month's end, a 23-hour day's);
//   - if it is a quota.Settler, settles exactly as SettleVectors say
//     (signed adjustments; token bucket and GCRA carry debt, the window
//     algorithms settle in the current window and never count below 0;
//     an absent bucket is full; every bucket of one Settle by exactly its
//     own amount), gives units back by a negative cost exactly as the
//     give-back vectors among them say (token bucket: refill to now, add
//     the units, cap at the burst; GCRA: TAT back by units x T, never
//     before now; an absent bucket stays full), and refuses bad input
//     with quota.ValidateSettle's error. Run skips these checks for a
//     Store that is not a Settler (and runs WaitVectors only up to their
//     first settlement);
//   - if it is a quota.Reporter, takes report calls exactly as a scripted
//     trace says, for token bucket and GCRA: a report charges what the
//     bucket holds of its units, and gives back the units of a negative
//     one (capped at the capacity; an absent bucket stays full); for the
//     window algorithms: a report charges its units to the window that
//     holds its Admitted time (the current one, beyond the limit if need
//     be; the sliding counter's previous one, weighted; the log's
//     timestamps at that time; a calendar window's Span while it has not
//     ended) and nothing to a window that is over, and a negative one
//     gives back at most what that window counted; a call sent twice
//     changes nothing;
//     Resolve tells what an applied call charged, and makes a call that
//     never arrived refused when it arrives late; the buckets of one call
//     are each decided on their own; and bad input is refused with
//     quota.ValidateReport's error;
//   - keeps each algorithm's promises over random sequences of takes on
//     fake time (Properties: random costs from 0 to the capacity + 2,
//     random steps of whole ms, from 0 to beyond the period, on every
//     algorithm): every Result's Remaining is within [0, Capacity()]; a
//     cost above the capacity is denied with quota.Never and charges
//     nothing; the units admitted within any interval of the period stay
//     within the algorithm's bound (token bucket and GCRA: the burst plus
//     what refills in it; sliding window log: the rate in (t-P, t]; fixed
//     window and sliding window counter: the rate in an aligned window,
//     twice the rate in any); a take of the same cost at RetryAfter is
//     admitted, and RetryAfter is never more than one refill interval
//     ceil(P/N) longer than needed; and a bucket's consumption carries
//     across a change of its limit, at one instant (remaining' =
//     max(0, remaining + capacity' - capacity)). Each failure names a
//     seed (seed=N): the environment variable FLOODGATE_STORETEST_SEED=N
//     replays that run's sequences exactly, and
//     FLOODGATE_STORETEST_SEQUENCES=M runs M sequences per algorithm
//     instead of the default 12, for a long local run.
//
// # Running it
//
// A store's test runs the suite with a factory:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
//			s, err := memstore.New(memstore.WithClock(clk))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// Every subtest gets a fresh store from the factory and a fresh fake clock
// at clock.Epoch, and uses keys with a prefix unique to the Run call, so a
// shared Redis is fine. Vectors with more than one bucket per Take run twice:
// with unrelated keys and with keys sharing one Redis Cluster hash tag.
//
// A store wrapper (fallback, otel, localfirst) checks that it forwards
// quota.Resetter to the store it wraps with CheckResetForwards.
//
// # Expiry and fake time
//
// The vectors are built so that a state kept beyond its TTL gives the same
// answer as a state dropped at its TTL (window states are then dead by
// their own arithmetic; token buckets are refilled to exactly the burst;
// package memstore's tests run the whole suite with every TTL an hour
// longer to keep this true). The opposite is not covered: a store whose
// keys expire on real time (Redis PEXPIRE) while the test moves a fake
// clock must not let a key vanish before its fake-time TTL; such a store
// should, under an injected clock, make its TTLs generous (a whole minute,
// say), which the vectors tolerate.
//
// Cost 0, which the quota.Algorithm doc defines as a read that charges
// nothing, is not in the vectors (redisstore's differential test compares
// it between stores). GCRA with a period that is not a whole multiple of
// the rate in µs is: gcra/odd_rate_cost2 and gcra/odd_rate_burst3 pin the
// exact doubles of the arithmetic relative to quota.GCRAEpoch, with its
// quota.GCRASlack, which is what lets rate 3/s burst 2 admit a cost of 2 on
// a new bucket (absolute Unix-µs TATs, kept to only 0.25 µs, denied it with
// RetryAfter 0).
package storetest
