//go:build system

package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// TestClusterRefundLostReply: x's master stalls (SIGSTOP) while the refund
// of a denied multi-slot take is on its way, so the caller's wait ends
// (undoTimeout, 1 s) and the retrier sends the refund again; when the
// master resumes, once a hook has seen that retry leave, it runs both,
// and the second, finding the refund's marker, gives nothing back twice.
//
// Bound: exactly one refund applied by the retrier and x reading what it
// read before the take, counts the scenario fixes. The stall is held
// until the retry is sent (an event, not a time), so a busy machine only
// makes the caller's wait and the retry later; a retry that times out
// before the resume is followed by another, and whichever answers finds
// the first send's marker. The wait for it is bounded by 10 s.
func TestClusterRefundLostReply(t *testing.T) {
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	lx := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: 1000}
	cl := wait()
	PausesHeld(t, cl) // the stall outlasts undoTimeout, 1 s, and more on a busy machine
	st, bx, by, nx := refundSetup(t, cl, "rl", lx)
	sends := &refundSends{}
	st.client.AddHook(sends)
	before := remaining(t, st, bx)
	st.beforeRefund = nx.Pause
	var res [2]quota.Result
	ok, err := st.Take(context.Background(), []quota.Bucket{bx, by}, res[:])
	st.beforeRefund = nil
	if ok || err == nil || !strings.Contains(err.Error(), "retried in the background") {
		nx.Resume()
		t.Fatalf("Take: allowed %v, error %v; want a deny whose refund is retried", ok, err)
	}
	// The first send, then a retry, both held by the stalled master.
	for deadline := time.Now().Add(10 * time.Second); sends.n.Load() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			nx.Resume()
			t.Fatalf("the refund was not sent again within 10s (%d sends)", sends.n.Load())
		}
	}
	nx.Resume()
	WaitFor(t, "a retried refund answered", func() bool { return st.retry.applied.Load() != 0 })
	if a := st.retry.applied.Load(); a != 1 {
		t.Fatalf("%d refunds applied by the retrier, want 1", a)
	}
	if got := remaining(t, st, bx); got != before {
		t.Fatalf("x reads %d after the stalled refund and its retry, want %d as before the take (one refund)", got, before)
	}
}
