// Package topk is the heavy hitters of a stream of records over a
// sliding interval, in fixed memory: which principals (a rule's users,
// tenants, API keys, client addresses) were denied most in the last
// minute, per rule, without a counter per principal.
//
// What it decides: the algorithm and its bounds. Each key (a rule) has
// Config.Slices slices of time that together span Config.Interval; a
// record counts in the slice of its time, and a slice is emptied and
// reused when its time comes round again, so a record is forgotten whole
// between Interval-Interval/Slices and Interval after it. Each slice is a
// Space-Saving summary (Metwally, Agrawal and El Abbadi, "Efficient
// Computation of Frequent and Top-k Elements in Data Streams", 2005) of
// Config.Capacity counters: a principal already counted adds one to its
// counter; a new one takes a free counter or, when all are in use, the
// counter of the least counted principal, starting from that count plus
// one, the count it took being its error. Hence, per slice of N records:
// a count never understates, overstates by its error at most, and the
// error is at most N/Capacity; every principal with more than
// N/Capacity records is tracked; and while a slice meets at most Capacity
// distinct principals, every count is exact. Summary.Top merges a key's
// slices with the same guarantees over the interval (see Top).
//
// Memory is fixed at New: each key's slices are allocated when the key is
// first recorded, Config.MaxKeys keys at most (a new key beyond it takes
// the place of one with nothing in the interval, or its records are
// dropped and counted), and a principal is kept in a counter of fixed
// size (MaxPrincipal bytes; a longer one is shortened with a hash). With
// the defaults (64 counters, 6 slices of 10 s, 64 keys) a key holds about
// 54 KiB and the whole Summary at most about 3.4 MiB, whatever the
// number of distinct principals (TestMemoryFlat measures a key and
// records a million principals).
//
// Cost: a record hashes the principal (hash/maphash), finds its counter
// in an open-addressing table and moves it in a min-heap, under the
// key's mutex: records of different keys never contend. It allocates
// nothing once its key is known, whether the principal is tracked or not
// (TestRecordDoesNotAllocate; BenchmarkRecord).
package topk
